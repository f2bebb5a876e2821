//! Pod spec conversion: a Kubernetes Pod (k8s-openapi) becomes CRI sandbox and container
//! configs. [`convert`] assembles them from the parts: environment ([`env`], [`expansion`],
//! [`service_env`], [`fieldpath`]), DNS and hostname ([`dns`]), security contexts
//! ([`security`]), resources and cgroups ([`resources`], [`quantity`]), image names
//! ([`imageref`], [`defaults`]) and Kubernetes name rules ([`names`]).

pub mod convert;
pub mod defaults;
pub mod dns;
pub mod env;
pub mod expansion;
pub mod fieldpath;
pub mod imageref;
pub mod names;
pub mod quantity;
pub mod resources;
pub mod security;
pub mod service_env;
