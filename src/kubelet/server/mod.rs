//! The kubelet API (`:10250`): what `kubectl logs` and `kubectl exec` reach through the API
//! server. Pure pieces first: the request → authorization attributes mapping ([`authz`]),
//! the containerLogs options ([`logopts`]), line selection ([`logselect`]) and the route
//! table ([`routes`]).

pub mod authz;
pub mod logopts;
pub mod logselect;
pub mod routes;
