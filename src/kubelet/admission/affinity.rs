//! Whether a pod may run on a node by its labels: every `nodeSelector` entry, and one of the
//! required nodeAffinity terms (terms are ORed, a term's expressions ANDed), as the scheduler's
//! `RequiredNodeAffinity`.

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod};
use std::collections::BTreeMap;

pub fn matches_node(pod: &Pod, labels: &BTreeMap<String, String>, node_name: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affinity_ok = required.is_none_or(|selector| {
        selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, labels, node_name))
    });
    selector_ok && affinity_ok
}

/// An empty term matches no node (as upstream).
fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let fields_map = BTreeMap::from([("metadata.name".to_string(), name.to_string())]);
    expressions.iter().all(|r| requirement_matches(r, labels))
        && fields.iter().all(|r| requirement_matches(r, &fields_map))
}

fn requirement_matches(req: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&req.key);
    let values = req.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), [want]) = (value.and_then(|v| number(v)), values) else {
                return false;
            };
            let Some(want) = number(want) else {
                return false;
            };
            if req.operator == "Gt" {
                have > want
            } else {
                have < want
            }
        }
        // An unknown operator matches nothing rather than everything.
        _ => false,
    }
}
