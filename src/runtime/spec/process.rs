//! The container process: argv (CRI command/args merged with the image's Entrypoint/Cmd), the
//! environment, the working directory and the user (resolved through the rootfs's /etc/passwd and
//! /etc/group contents, which the caller reads).

use crate::cri::api;
use crate::runtime::error::{Result, RuntimeError};

/// Used when neither the image nor the config sets PATH (containerd does the same).
pub const DEFAULT_PATH_ENV: &str =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Kubelet/Docker semantics: `command` replaces the image Entrypoint and drops the image Cmd;
/// `args` replaces the image Cmd.
pub fn merge_args(
    command: &[String],
    args: &[String],
    image_entrypoint: &[String],
    image_cmd: &[String],
) -> Result<Vec<String>> {
    let merged: Vec<String> = if !command.is_empty() {
        command.iter().chain(args).cloned().collect()
    } else if !args.is_empty() {
        image_entrypoint.iter().chain(args).cloned().collect()
    } else {
        image_entrypoint.iter().chain(image_cmd).cloned().collect()
    };
    if merged.is_empty() {
        return Err(RuntimeError::invalid(
            "no command specified: the config has no command/args and the image no Entrypoint/Cmd",
        ));
    }
    Ok(merged)
}

/// The image's `KEY=VALUE` list overlaid by the config's envs: a key keeps its first position,
/// the later value wins. `HOSTNAME` comes first (overridable) and PATH is defaulted.
pub fn merge_env(hostname: &str, image_env: &[String], envs: &[api::KeyValue]) -> Vec<String> {
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut set = |key: &str, value: &str| {
        if let Some(entry) = entries.iter_mut().find(|(k, _)| k == key) {
            entry.1 = value.to_string();
        } else {
            entries.push((key.to_string(), value.to_string()));
        }
    };
    if !hostname.is_empty() {
        set("HOSTNAME", hostname);
    }
    for item in image_env {
        match item.split_once('=') {
            Some((key, value)) if !key.is_empty() => set(key, value),
            // A bare "KEY" in an image config means an empty value.
            None if !item.is_empty() => set(item, ""),
            _ => {}
        }
    }
    for kv in envs {
        if !kv.key.is_empty() {
            set(&kv.key, &kv.value);
        }
    }
    let mut out: Vec<String> = entries
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !out.iter().any(|e| e.starts_with("PATH=")) {
        out.push(DEFAULT_PATH_ENV.to_string());
    }
    out
}

/// CRI working dir, else the image's, else `/`. Must be absolute.
pub fn working_dir(config_dir: &str, image_dir: Option<&str>) -> Result<String> {
    let dir = [config_dir, image_dir.unwrap_or("")]
        .into_iter()
        .find(|d| !d.is_empty())
        .unwrap_or("/");
    if !dir.starts_with('/') {
        return Err(RuntimeError::invalid(format!(
            "working directory {dir:?} is not absolute"
        )));
    }
    Ok(dir.to_string())
}

/// The resolved identity of the container process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvedUser {
    pub uid: u32,
    pub gid: u32,
    /// Primary gid first, then groups listing the user in /etc/group, then the config's.
    pub additional_gids: Vec<u32>,
    pub username: Option<String>,
}

/// The ids usable in the runtime's user namespace (`/proc/self/{uid,gid}_map`, `setgroups`).
/// On the host everything is mapped; as mapped root in a user namespace often only 0 is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdMapping {
    /// (first id inside, count) ranges.
    pub uids: Vec<(u32, u32)>,
    pub gids: Vec<(u32, u32)>,
    pub setgroups_allowed: bool,
}

impl IdMapping {
    pub fn host() -> IdMapping {
        IdMapping {
            uids: vec![(0, u32::MAX)],
            gids: vec![(0, u32::MAX)],
            setgroups_allowed: true,
        }
    }

    /// Parses the contents of uid_map, gid_map and setgroups.
    pub fn parse(uid_map: &str, gid_map: &str, setgroups: &str) -> IdMapping {
        let ranges = |map: &str| {
            map.lines()
                .filter_map(|l| {
                    let f: Vec<u32> = l
                        .split_whitespace()
                        .filter_map(|v| v.parse().ok())
                        .collect();
                    (f.len() == 3).then(|| (f[0], f[2]))
                })
                .collect()
        };
        IdMapping {
            uids: ranges(uid_map),
            gids: ranges(gid_map),
            setgroups_allowed: setgroups.trim() != "deny",
        }
    }

    fn contains(ranges: &[(u32, u32)], id: u32) -> bool {
        ranges
            .iter()
            .any(|(start, len)| id >= *start && u64::from(id) < u64::from(*start) + u64::from(*len))
    }

    /// Checks the user can exist here; drops supplementary groups that cannot (with a note).
    pub fn restrict(&self, user: &mut ResolvedUser) -> Result<Option<String>> {
        if !Self::contains(&self.uids, user.uid) || !Self::contains(&self.gids, user.gid) {
            return Err(RuntimeError::invalid(format!(
                "user {}:{} is not mapped in the runtime's user namespace (rootless runtime)",
                user.uid, user.gid
            )));
        }
        let before = user.additional_gids.clone();
        if !self.setgroups_allowed {
            user.additional_gids.clear();
        } else {
            user.additional_gids
                .retain(|g| Self::contains(&self.gids, *g));
        }
        // Worded without the ids: the caller logs each distinct notice once.
        Ok((before != user.additional_gids).then(|| {
            "supplementary groups are dropped (rootless): setgroups is denied or the groups are not mapped in this user namespace".to_string()
        }))
    }
}

/// The contents of the rootfs's /etc/passwd and /etc/group (None when missing).
#[derive(Clone, Debug, Default)]
pub struct EtcFiles {
    pub passwd: Option<String>,
    pub group: Option<String>,
}

struct PasswdEntry<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
}

fn passwd_entries(passwd: &str) -> impl Iterator<Item = PasswdEntry<'_>> {
    passwd.lines().filter_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let _password = fields.next()?;
        let uid = fields.next()?.trim().parse().ok()?;
        let gid = fields.next()?.trim().parse().ok()?;
        Some(PasswdEntry { name, uid, gid })
    })
}

struct GroupEntry<'a> {
    name: &'a str,
    gid: u32,
    members: Vec<&'a str>,
}

fn group_entries(group: &str) -> impl Iterator<Item = GroupEntry<'_>> {
    group.lines().filter_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let _password = fields.next()?;
        let gid = fields.next()?.trim().parse().ok()?;
        let members = fields
            .next()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .collect();
        Some(GroupEntry { name, gid, members })
    })
}

fn parse_id(value: i64, what: &str) -> Result<u32> {
    u32::try_from(value)
        .map_err(|_| RuntimeError::invalid(format!("{what} {value} is out of range")))
}

/// Resolves the user from the security context, else the image's `User` (`name`, `uid`,
/// `name:group`, `uid:gid`).
pub fn resolve_user(
    security: Option<&api::LinuxContainerSecurityContext>,
    image_user: Option<&str>,
    etc: &EtcFiles,
) -> Result<ResolvedUser> {
    let passwd = etc.passwd.as_deref().unwrap_or("");
    let group = etc.group.as_deref().unwrap_or("");
    let lookup_name = |name: &str| {
        passwd_entries(passwd)
            .find(|e| e.name == name)
            .map(|e| (e.uid, e.gid))
            .ok_or_else(|| {
                RuntimeError::invalid(format!(
                    "user {name:?} not found in the image's /etc/passwd"
                ))
            })
    };
    let by_uid = |uid: u32| passwd_entries(passwd).find(|e| e.uid == uid);

    if let Some(sc) = security
        && let Some(group) = &sc.run_as_group
        && sc.run_as_user.is_none()
        && sc.run_as_username.is_empty()
    {
        // containerd's generateUserString: a group alone names no user (kubelet always sends
        // the image's user with it).
        return Err(RuntimeError::invalid(format!(
            "user group \"{}\" is specified without user",
            group.value
        )));
    }
    let mut explicit_group: Option<u32> = None;
    let (uid, mut gid) = match security {
        Some(sc) if !sc.run_as_username.is_empty() => lookup_name(&sc.run_as_username)?,
        Some(sc) if sc.run_as_user.is_some() => {
            let uid = parse_id(
                sc.run_as_user.as_ref().map_or(0, |v| v.value),
                "run_as_user",
            )?;
            (uid, by_uid(uid).map_or(0, |e| e.gid))
        }
        _ => {
            let spec = image_user.unwrap_or("").trim();
            let (user_part, group_part) = match spec.split_once(':') {
                Some((u, g)) => (u, Some(g)),
                None => (spec, None),
            };
            let (uid, gid) = if user_part.is_empty() {
                (0, 0)
            } else if let Ok(uid) = user_part.parse::<u32>() {
                (uid, by_uid(uid).map_or(0, |e| e.gid))
            } else {
                lookup_name(user_part)?
            };
            if let Some(g) = group_part.filter(|g| !g.is_empty()) {
                explicit_group = Some(match g.parse::<u32>() {
                    Ok(gid) => gid,
                    Err(_) => group_entries(group)
                        .find(|e| e.name == g)
                        .map(|e| e.gid)
                        .ok_or_else(|| {
                            RuntimeError::invalid(format!(
                                "group {g:?} not found in the image's /etc/group"
                            ))
                        })?,
                });
            }
            (uid, gid)
        }
    };
    if let Some(g) = explicit_group {
        gid = g;
    }
    if let Some(run_as_group) = security.and_then(|sc| sc.run_as_group.as_ref()) {
        gid = parse_id(run_as_group.value, "run_as_group")?;
    }
    let username = by_uid(uid).map(|e| e.name.to_string());
    let strict = security.is_some_and(|sc| {
        sc.supplemental_groups_policy == api::SupplementalGroupsPolicy::Strict as i32
    });
    let mut gids = vec![gid];
    if !strict && let Some(name) = username.as_deref() {
        gids.extend(
            group_entries(group)
                .filter(|e| e.members.contains(&name))
                .map(|e| e.gid),
        );
    }
    for extra in security.map_or(&[][..], |sc| &sc.supplemental_groups[..]) {
        gids.push(parse_id(*extra, "supplemental group")?);
    }
    let mut seen = std::collections::HashSet::new();
    gids.retain(|g| seen.insert(*g));
    Ok(ResolvedUser {
        uid,
        gid,
        additional_gids: gids,
        username,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn args_merge_table() {
        // (command, args, entrypoint, cmd) -> argv
        let cases: &[(&[&str], &[&str], &[&str], &[&str], Option<&[&str]>)] = &[
            (
                &[],
                &[],
                &["/ep"],
                &["c1", "c2"],
                Some(&["/ep", "c1", "c2"]),
            ),
            (&["/cmd"], &[], &["/ep"], &["c1"], Some(&["/cmd"])),
            (&["/cmd"], &["a"], &["/ep"], &["c1"], Some(&["/cmd", "a"])),
            (
                &[],
                &["a", "b"],
                &["/ep"],
                &["c1"],
                Some(&["/ep", "a", "b"]),
            ),
            (&[], &["/bin/x"], &[], &["c1"], Some(&["/bin/x"])),
            (&[], &[], &[], &["/c"], Some(&["/c"])),
            (&[], &[], &[], &[], None),
        ];
        for (command, args, ep, cmd, want) in cases {
            let got = merge_args(&s(command), &s(args), &s(ep), &s(cmd));
            match want {
                Some(w) => assert_eq!(got.unwrap(), s(w), "{command:?} {args:?}"),
                None => assert!(matches!(got, Err(RuntimeError::InvalidArgument(_)))),
            }
        }
    }

    #[test]
    fn env_overlay_keeps_order_and_overrides() {
        let envs = vec![
            api::KeyValue {
                key: "B".into(),
                value: "cri".into(),
            },
            api::KeyValue {
                key: "NEW".into(),
                value: "x=y".into(),
            },
        ];
        let got = merge_env("pod-a", &s(&["A=1", "B=image", "PATH=/bin", "BARE"]), &envs);
        assert_eq!(
            got,
            s(&[
                "HOSTNAME=pod-a",
                "A=1",
                "B=cri",
                "PATH=/bin",
                "BARE=",
                "NEW=x=y"
            ])
        );
        let got = merge_env("", &[], &[]);
        assert_eq!(got, s(&[DEFAULT_PATH_ENV]));
    }

    #[test]
    fn working_dir_precedence() {
        assert_eq!(working_dir("/cri", Some("/img")).unwrap(), "/cri");
        assert_eq!(working_dir("", Some("/img")).unwrap(), "/img");
        assert_eq!(working_dir("", None).unwrap(), "/");
        assert_eq!(working_dir("", Some("")).unwrap(), "/");
        assert!(working_dir("rel", None).is_err());
    }

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
        daemon:x:1:1::/:/bin/false\n\
        app:x:1000:1001:App:/home/app:/bin/sh\n\
        broken line\n";
    const GROUP: &str = "root:x:0:\nwheel:x:10:root,app\napp:x:1001:\nvideo:x:44:app\n";

    fn etc() -> EtcFiles {
        EtcFiles {
            passwd: Some(PASSWD.into()),
            group: Some(GROUP.into()),
        }
    }

    fn sc(
        f: impl FnOnce(&mut api::LinuxContainerSecurityContext),
    ) -> api::LinuxContainerSecurityContext {
        let mut sc = api::LinuxContainerSecurityContext::default();
        f(&mut sc);
        sc
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn user_resolution_table() {
        let v = |value| Some(api::Int64Value { value });
        let cases: Vec<(
            Option<api::LinuxContainerSecurityContext>,
            Option<&str>,
            Result<(u32, u32, Vec<u32>), &str>,
        )> = vec![
            (None, None, Ok((0, 0, vec![0, 10]))),
            (None, Some("app"), Ok((1000, 1001, vec![1001, 10, 44]))),
            (None, Some("1000"), Ok((1000, 1001, vec![1001, 10, 44]))),
            (None, Some("4242"), Ok((4242, 0, vec![0]))),
            (None, Some("app:video"), Ok((1000, 44, vec![44, 10]))),
            (None, Some("daemon:7"), Ok((1, 7, vec![7]))),
            (None, Some("nobody"), Err("not found")),
            (None, Some("app:nogroup"), Err("not found")),
            (
                Some(sc(|s| s.run_as_user = v(1000))),
                Some("daemon"),
                Ok((1000, 1001, vec![1001, 10, 44])),
            ),
            (
                Some(sc(|s| {
                    s.run_as_user = v(5);
                    s.run_as_group = v(6);
                    s.supplemental_groups = vec![100, 6]
                })),
                None,
                Ok((5, 6, vec![6, 100])),
            ),
            (
                Some(sc(|s| s.run_as_username = "app".into())),
                None,
                Ok((1000, 1001, vec![1001, 10, 44])),
            ),
            (
                Some(sc(|s| {
                    s.run_as_username = "app".into();
                    s.supplemental_groups_policy = api::SupplementalGroupsPolicy::Strict as i32
                })),
                None,
                Ok((1000, 1001, vec![1001])),
            ),
            (
                Some(sc(|s| s.run_as_user = v(-1))),
                None,
                Err("out of range"),
            ),
        ];
        for (security, image_user, want) in cases {
            let got = resolve_user(security.as_ref(), image_user, &etc());
            match (want, got) {
                (Ok((uid, gid, gids)), Ok(u)) => {
                    assert_eq!(
                        (u.uid, u.gid, u.additional_gids),
                        (uid, gid, gids),
                        "{image_user:?} {security:?}"
                    )
                }
                (Err(msg), Err(e)) => assert!(e.to_string().contains(msg), "{e}"),
                (want, got) => panic!("{image_user:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn id_mapping_restricts_users() {
        let host = IdMapping::host();
        let mut u = ResolvedUser {
            uid: 1000,
            gid: 1000,
            additional_gids: vec![1000, 10],
            username: None,
        };
        assert_eq!(host.restrict(&mut u.clone()).unwrap(), None);
        let userns = IdMapping::parse("         0    1000          1\n", "0 1000 1\n", "deny\n");
        assert_eq!(userns.uids, vec![(0, 1)]);
        assert!(!userns.setgroups_allowed);
        assert!(matches!(
            userns.restrict(&mut u),
            Err(RuntimeError::InvalidArgument(_))
        ));
        let mut root = ResolvedUser {
            uid: 0,
            gid: 0,
            additional_gids: vec![0, 10],
            username: None,
        };
        assert!(userns.restrict(&mut root).unwrap().is_some());
        assert!(root.additional_gids.is_empty());
        let wide = IdMapping::parse("0 100000 65536", "0 100000 65536", "allow");
        let mut g = ResolvedUser {
            uid: 5,
            gid: 5,
            additional_gids: vec![5, 70000],
            username: None,
        };
        assert!(wide.restrict(&mut g).unwrap().is_some());
        assert_eq!(g.additional_gids, vec![5]);
    }

    #[test]
    fn user_without_etc_files() {
        let u = resolve_user(None, Some("123:456"), &EtcFiles::default()).unwrap();
        assert_eq!(
            (u.uid, u.gid, u.additional_gids, u.username),
            (123, 456, vec![456], None)
        );
        assert!(resolve_user(None, Some("app"), &EtcFiles::default()).is_err());
    }
}
