//! Key/value content of ConfigMaps and Secrets, as volumes and env vars see it.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use std::collections::BTreeMap;

/// A ConfigMap's `data` and `binaryData` (keys are unique across both in valid objects; `data`
/// wins on a clash).
pub fn config_map_entries(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in cm.data.iter().flatten() {
        out.insert(k.clone(), v.clone().into_bytes());
    }
    out
}

/// A Secret's `data`, with `stringData` merged over it as the API server does on write (there is
/// no API server in front of manifest files).
pub fn secret_entries(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone().into_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    #[test]
    fn string_data_overrides_data() {
        let secret = Secret {
            data: Some([("a".to_string(), ByteString(b"1".to_vec()))].into()),
            string_data: Some(
                [("a".to_string(), "2".to_string()), ("b".into(), "3".into())].into(),
            ),
            ..Default::default()
        };
        let entries = secret_entries(&secret);
        assert_eq!(entries.get("a").map(Vec::as_slice), Some(&b"2"[..]));
        assert_eq!(entries.get("b").map(Vec::as_slice), Some(&b"3"[..]));
    }

    #[test]
    fn config_map_merges_binary_data() {
        let cm = ConfigMap {
            data: Some([("text".to_string(), "hello".to_string())].into()),
            binary_data: Some([("bin".to_string(), ByteString(vec![0, 159]))].into()),
            ..Default::default()
        };
        let entries = config_map_entries(&cm);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries["bin"], vec![0, 159]);
    }
}
