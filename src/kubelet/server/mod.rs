//! The kubelet API (`:10250`): what `kubectl logs` and `kubectl exec` reach through the API
//! server. Pure pieces first: the request → authorization attributes mapping ([`authz`]),
//! the containerLogs options ([`logopts`]), line selection ([`logselect`]), the route
//! table ([`routes`]), the SubjectAccessReview and TokenReview cache ([`review`]).

pub mod authz;
pub mod logopts;
pub mod logselect;
pub mod review;
pub mod routes;
