//! The cluster's Services (a node may list and watch them all), for the service environment
//! variables of containers.

use super::cache::describe_watch;
use crate::kubelet::apiclient::ApiClient;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use std::time::Duration;
use tokio::task::JoinHandle;

/// A reflector over every Service.
#[derive(Clone)]
pub struct ServiceCache {
    store: Store<Service>,
}

impl ServiceCache {
    /// Starts the list+watch; the task runs until aborted.
    pub fn start(api: &ApiClient) -> (ServiceCache, JoinHandle<()>) {
        let (store, writer) = reflector::store();
        let services: Api<Service> = Api::all(api.client.clone());
        let stream = reflector::reflector(writer, watcher(services, watcher::Config::default()))
            .backoff(crate::kubelet::apiclient::watch_backoff());
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut failing = false;
            while let Some(item) = stream.next().await {
                match item {
                    Ok(_) if failing => {
                        tracing::info!("list/watch services: works again");
                        failing = false;
                    }
                    Ok(_) => {}
                    Err(err) => {
                        if !failing {
                            tracing::warn!(
                                "list/watch services (all namespaces): {}",
                                describe_watch(&err)
                            );
                        }
                        failing = true;
                    }
                }
            }
        });
        (ServiceCache { store }, task)
    }

    /// Waits (at most `timeout`) until the first list answered; false on timeout.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.store.wait_until_ready())
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The Services of `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Service> {
        self.store
            .state()
            .into_iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
            .map(|s| (*s).clone())
            .collect()
    }
}
