use super::*;

const FILE: &str = "/etc/runp/certs.d/registry.k8s.io/hosts.toml";

fn parsed(text: &str) -> HostsFile {
    parse(Path::new(FILE), text).expect("parses")
}

fn error(text: &str) -> String {
    parse(Path::new(FILE), text)
        .expect_err("refused")
        .to_string()
}

fn bases(registry: &str, text: Option<&str>, insecure: &[&str]) -> Vec<String> {
    let file = text.map(parsed);
    let insecure: Vec<String> = insecure.iter().map(|s| s.to_string()).collect();
    endpoints(registry, file.as_ref(), &insecure)
        .expect("endpoints")
        .into_iter()
        .map(|e| e.base.to_string())
        .collect()
}

#[test]
fn parses_containerds_fields_keeping_host_order() {
    let file = parsed(
        r#"
server = "https://registry.k8s.io"
ca = "root.pem"

[host."http://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]

[host."https://b.example"]
  skip_verify = true
  ca = ["/abs/ca.pem", "rel/ca.pem"]
  client = [["c.crt", "c.key"], ["both.pem", ""]]

[host."https://a.example/k8s"]
  capabilities = ["pull"]
  client = "one.pem"
  override_path = true
"#,
    );
    let dir = Path::new(FILE).parent().unwrap();
    assert_eq!(file.server.as_deref(), Some("https://registry.k8s.io"));
    assert_eq!(file.server_settings.tls.ca, vec![dir.join("root.pem")]);
    let names: Vec<&str> = file.hosts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "http://127.0.0.1:5000",
            "https://b.example",
            "https://a.example/k8s"
        ]
    );
    assert_eq!(
        file.hosts[0].1.capabilities,
        Some(Capabilities {
            pull: true,
            resolve: true,
            push: false
        })
    );
    let b = &file.hosts[1].1.tls;
    assert!(b.skip_verify);
    assert_eq!(
        b.ca,
        vec![PathBuf::from("/abs/ca.pem"), dir.join("rel/ca.pem")]
    );
    assert_eq!(
        b.client,
        vec![
            (dir.join("c.crt"), Some(dir.join("c.key"))),
            (dir.join("both.pem"), None)
        ]
    );
    let a = &file.hosts[2].1;
    assert!(a.override_path);
    assert_eq!(a.tls.client, vec![(dir.join("one.pem"), None)]);
}

#[test]
fn mistakes_are_refused_naming_the_file() {
    let cases = [
        ("mirror = \"x\"", "unknown field `mirror`"),
        (
            "[host.\"http://m\"]\n  skip_verfy = true",
            "host \"http://m\"",
        ),
        (
            "[host.\"http://m\"]\n  capabilities = [\"pull\", \"write\"]",
            "unknown capability \"write\"",
        ),
        ("server = 5", "server must be a string"),
        ("host = \"http://m\"", "host must be a table"),
        (
            "[host.\"http://m\"]\n  client = [[\"a\", \"b\", \"c\"]]",
            "client pairs",
        ),
        ("server = ", "TOML"),
    ];
    for (text, part) in cases {
        let message = error(text);
        assert!(
            message.starts_with(&format!("registry config {FILE}: ")),
            "{message}"
        );
        if part != "TOML" {
            assert!(message.contains(part), "{text:?}: {message}");
        }
    }
}

#[test]
fn hosts_come_first_then_the_server() {
    let mirror = r#"
[host."http://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]
[host."mirror.example:8443"]
"#;
    // (registry, hosts.toml, --insecure-registry, the API roots in the order tried)
    type Case<'a> = (&'a str, Option<&'a str>, &'a [&'a str], Vec<&'a str>);
    let table: Vec<Case> = vec![
        // No file: the registry itself, as before.
        (
            "registry.k8s.io",
            None,
            &[],
            vec!["https://registry.k8s.io/v2/"],
        ),
        (
            "docker.io",
            None,
            &[],
            vec!["https://registry-1.docker.io/v2/"],
        ),
        (
            "127.0.0.1:5001",
            None,
            &["127.0.0.1:5001"],
            vec!["http://127.0.0.1:5001/v2/"],
        ),
        // Mirrors in order, then the registry (no scheme means https).
        (
            "docker.io",
            Some(mirror),
            &[],
            vec![
                "http://127.0.0.1:5000/v2/",
                "https://mirror.example:8443/v2/",
                "https://registry-1.docker.io/v2/",
            ],
        ),
        // A server replaces the registry; paths get /v2 unless they have it or override it.
        (
            "gcr.io",
            Some("server = \"https://proxy.example/gcr\""),
            &[],
            vec!["https://proxy.example/gcr/v2/"],
        ),
        (
            "gcr.io",
            Some("server = \"https://proxy.example/gcr/v2/\""),
            &[],
            vec!["https://proxy.example/gcr/v2/"],
        ),
        (
            "gcr.io",
            Some("server = \"https://proxy.example/api\"\noverride_path = true"),
            &[],
            vec!["https://proxy.example/api/"],
        ),
        (
            "quay.io",
            Some("[host.\"http://10.0.0.1:5000/mirror/quay\"]\n  override_path = true"),
            &[],
            vec!["http://10.0.0.1:5000/mirror/quay/", "https://quay.io/v2/"],
        ),
    ];
    for (registry, file, insecure, want) in table {
        assert_eq!(bases(registry, file, insecure), want, "{registry} {file:?}");
    }
}

#[test]
fn capabilities_hosts_and_schemes() {
    let file = parsed(
        r#"
capabilities = ["pull"]
skip_verify = true
[host."http://127.0.0.1:5000"]
[host."https://[::1]:5001"]
  capabilities = ["resolve"]
"#,
    );
    let got = endpoints("registry.k8s.io", Some(&file), &[]).expect("endpoints");
    let summary: Vec<(&str, bool, bool, bool, bool)> = got
        .iter()
        .map(|e| {
            (
                e.host.as_str(),
                e.capabilities.pull,
                e.capabilities.resolve,
                e.plain_http,
                e.tls.skip_verify,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("127.0.0.1:5000", true, true, true, false),
            ("[::1]:5001", false, true, false, false),
            ("registry.k8s.io", true, false, false, true),
        ]
    );
    for bad in ["ftp://m", "http://user@m", "http://m/?q=1"] {
        let text = format!("[host.\"{bad}\"]");
        let err = endpoints("r", Some(&parsed(&text)), &[])
            .expect_err(bad)
            .to_string();
        assert!(err.contains(bad) && err.contains(FILE), "{err}");
    }
}

#[test]
fn the_most_specific_directory_wins_and_default_is_the_fallback() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |sub: &str, server: &str| {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        std::fs::write(
            dir.path().join(sub).join(FILE_NAME),
            format!("server = \"{server}\""),
        )
        .unwrap();
    };
    let server = |registry: &str| {
        load(dir.path(), registry)
            .expect("loads")
            .and_then(|f| f.server)
    };
    assert_eq!(server("registry.k8s.io"), None);
    write("_default", "http://default");
    write("registry.k8s.io", "http://k8s");
    write("127.0.0.1:5000", "http://colon");
    write("127.0.0.1_5001_", "http://underscore");
    write("127.0.0.1:5001", "http://colon-5001");
    assert_eq!(server("registry.k8s.io").as_deref(), Some("http://k8s"));
    assert_eq!(server("gcr.io").as_deref(), Some("http://default"));
    assert_eq!(server("127.0.0.1:5000").as_deref(), Some("http://colon"));
    assert_eq!(
        server("127.0.0.1:5001").as_deref(),
        Some("http://underscore")
    );
    // Nothing outside DIR is read, whatever the name.
    assert_eq!(server(".."), None);
    std::fs::create_dir_all(dir.path().join("bad.io")).unwrap();
    std::fs::write(dir.path().join("bad.io").join(FILE_NAME), "nope = 1").unwrap();
    let err = load(dir.path(), "bad.io")
        .expect_err("unknown field")
        .to_string();
    assert!(
        err.contains("bad.io/hosts.toml") && err.contains("nope"),
        "{err}"
    );
}
