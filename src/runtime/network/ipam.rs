//! Pod IPs of the bridge network, in host-local's on-disk format: `<dataDir>/<network>/<ip>`
//! holds `<id>\r\n<ifname>`, and `last_reserved_ip.0` says where the next search starts. CNI
//! mode and the bridge network thus share one lease directory, and a node switched between them
//! hands out no IP twice. A lease is an O_CREAT|O_EXCL file: concurrent allocators (host-local
//! too) never take one IP twice, with no lock.

use super::NetworkError;
use ipnet::Ipv4Net;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

const LAST_RESERVED: &str = "last_reserved_ip.0";

/// The pod gateway: the subnet's first host address (the bridge's address).
pub fn gateway(subnet: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(subnet.network()) + 1)
}

/// The addresses a pod may get, in search order: the hosts after the gateway up to the one
/// before broadcast, starting after `last` and wrapping around, as host-local searches.
pub fn candidates(subnet: Ipv4Net, last: Option<Ipv4Addr>) -> impl Iterator<Item = Ipv4Addr> {
    let first = u32::from(gateway(subnet)) + 1;
    let end = u32::from(subnet.broadcast()); // exclusive
    let count = end.saturating_sub(first);
    let start = match last.map(u32::from) {
        Some(l) if (first..end).contains(&l) => l + 1 - first,
        _ => 0,
    };
    (0..count).map(move |i| Ipv4Addr::from(first + (start + i) % count))
}

/// Leases of one network's IPs.
#[derive(Clone, Debug)]
pub struct Ipam {
    dir: PathBuf,
    subnet: Ipv4Net,
}

impl Ipam {
    /// Makes `<data_dir>/<network>` if missing.
    pub fn open(data_dir: &Path, network: &str, subnet: Ipv4Net) -> Result<Ipam, NetworkError> {
        let dir = data_dir.join(network);
        std::fs::create_dir_all(&dir).map_err(NetworkError::io("creating", &dir))?;
        Ok(Ipam { dir, subnet })
    }

    /// The lease directory `dir` (made by [`Ipam::open`]) of `subnet`.
    pub fn at(dir: PathBuf, subnet: Ipv4Net) -> Ipam {
        Ipam { dir, subnet }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Leases a free IP to `id`.
    pub fn allocate(&self, id: &str, ifname: &str) -> Result<Ipv4Addr, NetworkError> {
        let last = std::fs::read_to_string(self.dir.join(LAST_RESERVED))
            .ok()
            .and_then(|s| s.trim().parse().ok());
        for ip in candidates(self.subnet, last) {
            let path = self.dir.join(ip.to_string());
            let mut file = match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(NetworkError::io("creating the IP lease", &path)(e)),
            };
            if let Err(e) = file.write_all(format!("{id}\r\n{ifname}").as_bytes()) {
                let _ = std::fs::remove_file(&path);
                return Err(NetworkError::io("writing the IP lease", &path)(e));
            }
            // Only a hint for the next search; losing it costs a longer scan, nothing else.
            let _ = std::fs::write(self.dir.join(LAST_RESERVED), ip.to_string());
            return Ok(ip);
        }
        Err(NetworkError::InvalidConfig(format!(
            "no free pod IP left in {} ({} leases in {})",
            self.subnet,
            self.leases().len(),
            self.dir.display()
        )))
    }

    /// Releases `id`'s lease: `ip`'s when known, else any that names `id` (an ADD cut short
    /// before its result was recorded). Idempotent; a lease of another id is kept.
    pub fn release(&self, id: &str, ip: Option<Ipv4Addr>) -> Result<(), NetworkError> {
        let paths = match ip {
            Some(ip) => vec![self.dir.join(ip.to_string())],
            None => self.leases(),
        };
        for path in paths {
            let Ok(content) = std::fs::read_to_string(&path) else {
                continue;
            };
            if content.lines().next().map(str::trim) == Some(id) {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(NetworkError::io("removing the IP lease", &path)(e)),
                }
            }
        }
        Ok(())
    }

    /// The lease files (named by an IPv4 address).
    fn leases(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<Ipv4Addr>().is_ok())
            .map(|e| e.path())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(subnet: &str, last: Option<&str>, n: usize) -> Vec<String> {
        candidates(subnet.parse().unwrap(), last.map(|l| l.parse().unwrap()))
            .take(n)
            .map(|a| a.to_string())
            .collect()
    }

    #[test]
    fn candidates_skip_network_gateway_and_broadcast_and_wrap_after_the_last_lease() {
        let cases: [(&str, Option<&str>, usize, &[&str]); 6] = [
            ("10.88.0.0/30", None, 9, &["10.88.0.2"]),
            (
                "10.88.0.0/29",
                None,
                9,
                &[
                    "10.88.0.2",
                    "10.88.0.3",
                    "10.88.0.4",
                    "10.88.0.5",
                    "10.88.0.6",
                ],
            ),
            (
                "10.88.0.0/29",
                Some("10.88.0.4"),
                9,
                &[
                    "10.88.0.5",
                    "10.88.0.6",
                    "10.88.0.2",
                    "10.88.0.3",
                    "10.88.0.4",
                ],
            ),
            (
                "10.88.0.0/29",
                Some("10.88.0.6"),
                2,
                &["10.88.0.2", "10.88.0.3"],
            ),
            // A hint outside the range (another subnet before) starts from the beginning.
            ("10.88.0.0/29", Some("10.1.2.3"), 1, &["10.88.0.2"]),
            (
                "10.88.0.0/16",
                Some("10.88.0.255"),
                2,
                &["10.88.1.0", "10.88.1.1"],
            ),
        ];
        for (subnet, last, n, want) in cases {
            assert_eq!(ips(subnet, last, n), want, "{subnet} after {last:?}");
        }
        assert_eq!(
            gateway("10.88.0.0/16".parse().unwrap()).to_string(),
            "10.88.0.1"
        );
    }

    #[test]
    fn leases_are_exclusive_found_by_id_and_released_only_for_their_id() {
        let tmp = tempfile::tempdir().unwrap();
        let ipam = Ipam::open(tmp.path(), "runp", "10.9.0.0/29".parse().unwrap()).unwrap();
        let got: Vec<Ipv4Addr> = (0..5)
            .map(|i| ipam.allocate(&format!("pod{i}"), "eth0").unwrap())
            .collect();
        let want: Vec<Ipv4Addr> = (2..=6).map(|h| Ipv4Addr::new(10, 9, 0, h)).collect();
        assert_eq!(got, want);
        let full = ipam.allocate("pod5", "eth0").unwrap_err().to_string();
        assert!(
            full.contains("no free pod IP left in 10.9.0.0/29"),
            "{full}"
        );
        let lease = std::fs::read_to_string(tmp.path().join("runp/10.9.0.4")).unwrap();
        assert_eq!(lease, "pod2\r\neth0", "host-local's format");

        // Another id's lease is kept; the owner's goes, by IP or by a scan.
        ipam.release("pod9", Some(want[2])).unwrap();
        assert!(tmp.path().join("runp/10.9.0.4").exists());
        ipam.release("pod2", Some(want[2])).unwrap();
        ipam.release("pod4", None).unwrap();
        ipam.release("pod4", None).unwrap();
        assert!(!tmp.path().join("runp/10.9.0.4").exists());
        assert!(!tmp.path().join("runp/10.9.0.6").exists());
        // The search goes on after the last lease, then wraps to the freed ones.
        assert_eq!(ipam.allocate("a", "eth0").unwrap(), want[2]);
        assert_eq!(ipam.allocate("b", "eth0").unwrap(), want[4]);
    }
}
