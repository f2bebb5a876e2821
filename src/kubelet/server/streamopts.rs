//! The query of `/exec`, `/attach`, `/portForward` and `/run` as the API server forwards it
//! (`command=…&stdin=1&stdout=1&tty=1`, `port=…`, `cmd=…`), checked as kubelet checks it.

use super::logopts::decode;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamOptionsError {
    #[error("you must specify at least 1 of stdin, stdout, stderr")]
    NoStreams,
    #[error("you must specify at least one command for the container")]
    NoCommand,
    #[error("invalid port {0:?}")]
    Port(String),
}

fn pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k), decode(v))
    })
}

fn flag(v: &str) -> bool {
    matches!(v, "1" | "true" | "True" | "TRUE")
}

/// Options of an exec (`command` required) or attach request.
pub fn stream_options(query: &str, exec: bool) -> Result<StreamOptions, StreamOptionsError> {
    let mut opts = StreamOptions::default();
    for (k, v) in pairs(query) {
        match k.as_str() {
            "command" => opts.command.push(v),
            "stdin" | "input" => opts.stdin = flag(&v),
            "stdout" | "output" => opts.stdout = flag(&v),
            "stderr" | "error" => opts.stderr = flag(&v),
            "tty" => opts.tty = flag(&v),
            _ => {}
        }
    }
    if opts.tty && opts.stderr {
        // A terminal has one output stream; kubelet drops stderr rather than failing.
        opts.stderr = false;
    }
    if !opts.stdin && !opts.stdout && !opts.stderr {
        return Err(StreamOptionsError::NoStreams);
    }
    if exec && opts.command.is_empty() {
        return Err(StreamOptionsError::NoCommand);
    }
    Ok(opts)
}

/// `port=` values of a port-forward request (WebSocket clients name them in the query).
pub fn ports(query: &str) -> Result<Vec<i32>, StreamOptionsError> {
    pairs(query)
        .filter(|(k, _)| k == "port")
        .flat_map(|(_, v)| {
            v.split(',')
                .map(|p| p.trim().to_string())
                .collect::<Vec<_>>()
        })
        .map(|p| match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(i32::from(n)),
            _ => Err(StreamOptionsError::Port(p)),
        })
        .collect()
}

/// The command of `/run` (`cmd`, split on whitespace as kubelet's strings.Fields).
pub fn run_command(query: &str) -> Result<Vec<String>, StreamOptionsError> {
    let command: Vec<String> = pairs(query)
        .filter(|(k, _)| k == "cmd")
        .flat_map(|(_, v)| v.split_whitespace().map(String::from).collect::<Vec<_>>())
        .collect();
    if command.is_empty() {
        return Err(StreamOptionsError::NoCommand);
    }
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_and_attach_queries() {
        let o = stream_options(
            "command=sh&command=-c&command=echo+a%26b&stdin=1&stdout=1",
            true,
        )
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo a&b"]);
        assert!(o.stdin && o.stdout && !o.stderr && !o.tty);
        let o = stream_options("command=sh&stdout=true&stderr=1&tty=1", true).unwrap();
        assert!(o.tty && o.stdout && !o.stderr, "tty drops stderr");
        assert!(stream_options("stdin=1", false).unwrap().stdin);
        let table = [
            ("command=sh", true, StreamOptionsError::NoStreams),
            ("stdout=0&command=sh", true, StreamOptionsError::NoStreams),
            ("stdout=1", true, StreamOptionsError::NoCommand),
        ];
        for (query, exec, want) in table {
            assert_eq!(stream_options(query, exec), Err(want), "{query}");
        }
    }

    #[test]
    fn ports_and_run_commands() {
        assert_eq!(ports("port=80&port=8080,9090"), Ok(vec![80, 8080, 9090]));
        assert_eq!(ports(""), Ok(vec![]));
        assert_eq!(ports("port=0"), Err(StreamOptionsError::Port("0".into())));
        assert_eq!(ports("port=x"), Err(StreamOptionsError::Port("x".into())));
        assert_eq!(
            run_command("cmd=ls+-l+%2F"),
            Ok(vec!["ls".into(), "-l".into(), "/".into()])
        );
        assert_eq!(run_command("cmd="), Err(StreamOptionsError::NoCommand));
    }
}
