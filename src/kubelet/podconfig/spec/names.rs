//! Name rules of the Kubernetes API (`k8s.io/apimachinery/pkg/util/validation`), returning the
//! reason a name is invalid.

/// DNS-1123 label: at most 63 lowercase alphanumerics or '-', starting and ending alphanumeric.
pub fn check_dns1123_label(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > 63 {
        return Err(format!("{value:?} must be no more than 63 characters"));
    }
    if !is_label_shaped(value) {
        return Err(format!(
            "{value:?} is not a valid DNS-1123 label: lowercase alphanumeric characters or '-', \
             starting and ending with an alphanumeric character"
        ));
    }
    Ok(())
}

/// DNS-1123 subdomain: at most 253 characters, dot-separated label-shaped parts.
pub fn check_dns1123_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > 253 {
        return Err(format!("{value:?} must be no more than 253 characters"));
    }
    if !value.split('.').all(is_label_shaped) {
        return Err(format!(
            "{value:?} is not a valid DNS-1123 subdomain: lowercase alphanumeric characters, '-' \
             or '.', each part starting and ending with an alphanumeric character"
        ));
    }
    Ok(())
}

fn is_label_shaped(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

/// IANA service name (container port names): at most 15 characters, lowercase alphanumerics
/// and '-', at least one letter, no leading, trailing or doubled '-'.
pub fn check_port_name(value: &str) -> Result<(), String> {
    let reason = if value.is_empty() {
        "must not be empty"
    } else if value.len() > 15 {
        "must be no more than 15 characters"
    } else if !value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        "must contain only lowercase alphanumeric characters or '-'"
    } else if !value.bytes().any(|b| b.is_ascii_lowercase()) {
        "must contain at least one letter"
    } else if value.contains("--") {
        "must not contain consecutive hyphens"
    } else if value.starts_with('-') || value.ends_with('-') {
        "must not begin or end with a hyphen"
    } else {
        return Ok(());
    };
    Err(format!("port name {value:?} {reason}"))
}

/// Environment variable names (the relaxed rule): printable ASCII other than '='.
pub fn is_env_var_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'=')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        for ok in ["a", "web", "web-1", "0", "a".repeat(63).as_str()] {
            assert!(check_dns1123_label(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Web",
            "-a",
            "a-",
            "a.b",
            "a_b",
            "a".repeat(64).as_str(),
            "é",
        ] {
            assert!(check_dns1123_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn subdomains() {
        for ok in ["a", "a.b", "my-pod.v1", "0.0"] {
            assert!(check_dns1123_subdomain(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "A.b",
            "a.-b",
            "a".repeat(254).as_str(),
        ] {
            assert!(check_dns1123_subdomain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn port_names() {
        for ok in ["http", "h2c", "web-8080", "a"] {
            assert!(check_port_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "8080",
            "Http",
            "-http",
            "http-",
            "a--b",
            "abcdefghijklmnop",
            "a_b",
        ] {
            assert!(check_port_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_names() {
        assert!(is_env_var_name("PATH"));
        assert!(is_env_var_name("my.var-1 x"));
        assert!(!is_env_var_name(""));
        assert!(!is_env_var_name("A=B"));
        assert!(!is_env_var_name("tab\t"));
        assert!(!is_env_var_name("é"));
    }
}
