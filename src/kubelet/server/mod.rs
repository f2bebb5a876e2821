//! The kubelet API (`:10250`): what `kubectl logs` and `kubectl exec` reach through the API
//! server. Pure pieces: the request → authorization attributes mapping ([`authz`]), the
//! containerLogs options ([`logopts`]), line selection ([`logselect`]), the route table
//! ([`routes`]), the SubjectAccessReview and TokenReview cache ([`review`]), the stream
//! queries ([`streamopts`]). The server: TLS and client certificates ([`tls`]), authentication
//! and authorization ([`auth`]), the listener ([`serve`]), the endpoints ([`handlers`],
//! [`logs`], [`stats`], and [`proxy`] for exec/attach/portForward streams).

pub mod auth;
pub mod authz;
pub mod csr;
pub mod handlers;
pub mod logopts;
pub mod logs;
pub mod logselect;
pub mod lookup;
pub mod proxy;
pub mod response;
pub mod review;
pub mod routes;
pub mod serve;
pub mod stats;
pub mod streamopts;
pub mod tls;

pub use auth::{ApiReviews, Auth, AuthorizationMode, Reviews};
pub use handlers::{Context, PodSource};
pub use serve::{KubeletServer, ServeError};
