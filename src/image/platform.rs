//! Choosing this host's manifest from an image index (or Docker manifest list): one rule for
//! local imports and registry pulls alike.

use oci_spec::image::Descriptor;

/// The OCI os/architecture names of this host.
pub fn host_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    ("linux", arch)
}

/// The first entry for `os`/`arch`. Entries without a platform (e.g. attestations pushed as
/// `unknown/unknown`, or none at all) never match.
pub fn choose<'a>(manifests: &'a [Descriptor], os: &str, arch: &str) -> Option<&'a Descriptor> {
    manifests.iter().find(|m| {
        m.platform()
            .as_ref()
            .is_some_and(|p| p.os().to_string() == os && p.architecture().to_string() == arch)
    })
}

/// The platforms an index offers, for "no manifest for this host" errors.
pub fn available(manifests: &[Descriptor]) -> String {
    let platforms: Vec<String> = manifests
        .iter()
        .filter_map(|m| m.platform().as_ref())
        .map(|p| format!("{}/{}", p.os(), p.architecture()))
        .collect();
    if platforms.is_empty() {
        "none".to_string()
    } else {
        platforms.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::image::{Arch, DescriptorBuilder, MediaType, Os, PlatformBuilder};

    fn entry(n: u8, platform: Option<(Os, Arch)>) -> Descriptor {
        let mut builder = DescriptorBuilder::default()
            .media_type(MediaType::ImageManifest)
            .digest(
                format!("sha256:{}", format!("{n:02x}").repeat(32))
                    .parse::<oci_spec::image::Digest>()
                    .unwrap(),
            )
            .size(1u64);
        if let Some((os, arch)) = platform {
            builder = builder.platform(
                PlatformBuilder::default()
                    .os(os)
                    .architecture(arch)
                    .build()
                    .unwrap(),
            );
        }
        builder.build().unwrap()
    }

    #[test]
    fn chooses_the_first_matching_platform() {
        let index = vec![
            entry(1, Some((Os::Linux, Arch::ARM64))),
            entry(2, None),
            entry(3, Some((Os::Linux, Arch::Amd64))),
            entry(4, Some((Os::Linux, Arch::Amd64))),
            entry(5, Some((Os::Windows, Arch::Amd64))),
        ];
        let cases: Vec<(&str, &str, Option<usize>)> = vec![
            ("linux", "amd64", Some(2)),
            ("linux", "arm64", Some(0)),
            ("windows", "amd64", Some(4)),
            ("linux", "s390x", None),
        ];
        for (os, arch, want) in cases {
            let got = choose(&index, os, arch).map(|d| index.iter().position(|x| x == d).unwrap());
            assert_eq!(got, want, "{os}/{arch}");
        }
        assert_eq!(
            available(&index),
            "linux/arm64, linux/amd64, linux/amd64, windows/amd64"
        );
        assert_eq!(available(&[entry(9, None)]), "none");
    }
}
