//! The kubelet API (`:10250`): what `kubectl logs` and `kubectl exec` reach through the API
//! server. Pure pieces first: the request → authorization attributes mapping
//! ([`authz`]) and the containerLogs options ([`logopts`]).

pub mod authz;
pub mod logopts;
