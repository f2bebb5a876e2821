//! The status patch: a JSON merge patch (RFC 7386) from what the API server has to what the
//! agent computed. Pure.
//!
//! Lists are replaced whole (merge patch semantics), which is right for the lists the node owns
//! (conditions, container statuses, IPs). Maps are patched key by key with `null` for what went
//! away, so a container state moving from `running` to `terminated` loses `running`. Top-level
//! fields the agent does not produce (set by other controllers) are left alone.

use serde_json::{Map, Value};

/// Top-level status fields the node owns: removed from the API when the agent drops them.
pub const NODE_STATUS_FIELDS: &[&str] = &[
    "phase",
    "conditions",
    "message",
    "reason",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "containerStatuses",
    "initContainerStatuses",
    "qosClass",
];

/// The merge patch taking `base` to `new`, or None when they agree. Keys of `base` missing from
/// `new` are removed only when `owned` says so (at the top level; below it, always).
pub fn status_patch(base: &Value, new: &Value) -> Option<Value> {
    let patch = diff(base, new, &|key| NODE_STATUS_FIELDS.contains(&key));
    patch.filter(|p| p.as_object().is_none_or(|o| !o.is_empty()))
}

fn diff(base: &Value, new: &Value, owned: &dyn Fn(&str) -> bool) -> Option<Value> {
    match (base, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut out = Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(previous) if previous == value => {}
                    Some(previous) => {
                        if let Some(change) = diff(previous, value, &|_| true) {
                            out.insert(key.clone(), change);
                        }
                    }
                    None => {
                        out.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in old.keys() {
                if !new.contains_key(key) && owned(key) {
                    out.insert(key.clone(), Value::Null);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (old, new) if old == new => None,
        // A value that was null in the base must still be sent as the new value.
        (_, new) => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patches_carry_changes_and_removals_only() {
        let running = json!({
            "phase": "Running",
            "nominatedNodeName": "other",
            "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "t1"}}}],
            "podIP": "10.0.0.2",
        });
        let cases = [
            // Same: no patch.
            (running.clone(), running.clone(), None),
            // A field of someone else is kept; one the node owns and dropped is removed.
            (
                running.clone(),
                json!({
                    "phase": "Running",
                    "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "t1"}}}],
                }),
                Some(json!({"podIP": null})),
            ),
            // Lists go whole; maps key by key.
            (
                json!({"phase": "Running", "a": {"running": {"x": 1}, "keep": 2}}),
                json!({"phase": "Failed", "a": {"terminated": {"exitCode": 1}, "keep": 2}}),
                Some(
                    json!({"phase": "Failed", "a": {"terminated": {"exitCode": 1}, "running": null}}),
                ),
            ),
            (
                json!({"conditions": [{"type": "A"}, {"type": "B"}]}),
                json!({"conditions": [{"type": "A"}]}),
                Some(json!({"conditions": [{"type": "A"}]})),
            ),
            // From nothing: everything.
            (
                json!({}),
                json!({"phase": "Pending"}),
                Some(json!({"phase": "Pending"})),
            ),
        ];
        for (i, (base, new, want)) in cases.into_iter().enumerate() {
            assert_eq!(status_patch(&base, &new), want, "case {i}");
        }
    }
}
