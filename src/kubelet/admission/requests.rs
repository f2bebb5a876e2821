//! A pod's effective requests as kubelet computes them (resourcehelper.PodRequests): the sum of
//! its containers and restartable init containers (sidecars), at least the largest regular
//! init container plus the sidecars started before it, plus the pod overhead.

use crate::kubelet::podconfig::spec::quantity::Quantity;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

/// Requests in the units kubelet's messages use: milli-CPU and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodRequests {
    pub cpu_millis: i64,
    pub memory: i64,
}

impl PodRequests {
    pub fn plus(&self, other: &PodRequests) -> PodRequests {
        PodRequests {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory: self.memory.saturating_add(other.memory),
        }
    }

    fn max(&self, other: &PodRequests) -> PodRequests {
        PodRequests {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory: self.memory.max(other.memory),
        }
    }
}

/// A quantity, zero when missing or unparsable (validation refused bad ones before).
pub fn quantity(q: Option<&ApiQuantity>) -> Quantity {
    Quantity::parse_opt(q).unwrap_or_default()
}

/// A container's requests; a limit stands for a missing request, as the API server defaults.
fn container_requests(container: &Container) -> PodRequests {
    let resources = container.resources.as_ref();
    let get = |name: &str| {
        let request = resources.and_then(|r| r.requests.as_ref()?.get(name));
        let limit = resources.and_then(|r| r.limits.as_ref()?.get(name));
        quantity(request.or(limit))
    };
    PodRequests {
        cpu_millis: get("cpu").milli_value(),
        memory: get("memory").value(),
    }
}

pub fn pod_requests(pod: &Pod) -> PodRequests {
    let Some(spec) = pod.spec.as_ref() else {
        return PodRequests::default();
    };
    let mut sum = spec
        .containers
        .iter()
        .map(container_requests)
        .fold(PodRequests::default(), |a, b| a.plus(&b));
    let mut sidecars = PodRequests::default();
    let mut init_max = PodRequests::default();
    for init in spec.init_containers.iter().flatten() {
        let requests = container_requests(init);
        if init.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.plus(&requests);
            sum = sum.plus(&requests);
        } else {
            init_max = init_max.max(&sidecars.plus(&requests));
        }
    }
    let overhead = spec.overhead.as_ref();
    let overhead = PodRequests {
        cpu_millis: quantity(overhead.and_then(|o| o.get("cpu"))).milli_value(),
        memory: quantity(overhead.and_then(|o| o.get("memory"))).value(),
    };
    sum.max(&init_max).plus(&overhead)
}
