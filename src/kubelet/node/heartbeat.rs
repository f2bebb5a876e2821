//! The node's background loop: register (retried with back-off), then every 10 s measure and
//! patch the status when it changed (at least every 5 min), and renew the Lease; failures are
//! retried with back-off and logged once per change.

use super::events::{self, NodeEvents};
use super::failure::{Backoff, Failure, FailureLog, Report, call};
use super::info::{HostFacts, measure};
use super::lease;
use super::options::NodeOptions;
use super::register::{Registered, register};
use super::status::{self, Readiness, StatusInputs, Thresholds, build_node_status};
use crate::cri::{RuntimeService, api};
use crate::kubelet::clock::Clock;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::api::{Api, GetParams, Patch, PatchParams};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// kubelet's nodeStatusUpdateFrequency: how often the status is computed and compared.
pub const STATUS_UPDATE_INTERVAL: Duration = Duration::from_secs(10);
/// kubelet's nodeStatusReportFrequency: the status is sent at least this often.
pub const STATUS_REPORT_INTERVAL: Duration = Duration::from_secs(300);

pub struct Heartbeat {
    pub client: kube::Client,
    pub runtime: Arc<dyn RuntimeService>,
    pub opts: NodeOptions,
    pub clock: Arc<dyn Clock>,
    pub events: Arc<dyn NodeEvents>,
    pub facts: HostFacts,
    pub node_tx: watch::Sender<Option<Node>>,
    failures: FailureLog,
    node: Option<Node>,
    /// The status the API showed at adoption (None for a created Node).
    previous_for_transitions: Option<NodeStatus>,
    sent: Option<NodeStatus>,
    last_report: Option<Instant>,
    runtime_version: String,
    lease_exists: bool,
    warned_degraded: bool,
    started_event: bool,
}

impl Heartbeat {
    pub fn new(
        client: kube::Client,
        runtime: Arc<dyn RuntimeService>,
        opts: NodeOptions,
        clock: Arc<dyn Clock>,
        events: Arc<dyn NodeEvents>,
        facts: HostFacts,
        node_tx: watch::Sender<Option<Node>>,
    ) -> Heartbeat {
        Heartbeat {
            client,
            runtime,
            opts,
            clock,
            events,
            facts,
            node_tx,
            failures: FailureLog::default(),
            node: None,
            previous_for_transitions: None,
            sent: None,
            last_report: None,
            runtime_version: String::new(),
            lease_exists: false,
            warned_degraded: false,
            started_event: false,
        }
    }

    fn note(&mut self, operation: &'static str, outcome: &Result<(), Failure>) {
        match outcome {
            Ok(()) => {
                if self.failures.succeeded(operation) == Report::Recovered {
                    tracing::info!(node = %self.opts.node_name, "{operation}: working again");
                }
            }
            Err(failure) => {
                if self.failures.failed(operation, failure) == Report::Failed {
                    tracing::warn!(node = %self.opts.node_name,
                        "{operation} failed (retrying): {failure}");
                }
            }
        }
    }

    /// Creates or adopts the Node (one attempt; the caller logs a failure).
    pub async fn register(&mut self) -> Result<(), Failure> {
        let (node, how) = register(&self.client, &self.opts, &self.facts.architecture).await?;
        match how {
            Registered::Created => {
                tracing::info!(node = %self.opts.node_name, "registered the node")
            }
            Registered::Adopted => {
                tracing::info!(node = %self.opts.node_name, "adopted the existing node")
            }
        }
        // An adopted Node's conditions are the base for transition times and events; the
        // first heartbeat after (re)registration is always sent.
        self.sent = None;
        self.last_report = None;
        self.previous_for_transitions = node.status.clone();
        self.node = Some(node.clone());
        self.node_tx.send_replace(Some(node));
        Ok(())
    }

    pub fn registered(&self) -> bool {
        self.node.is_some()
    }

    async fn runtime_state(&mut self) -> (Readiness, Option<api::StatusResponse>) {
        if self.runtime_version.is_empty()
            && let Ok(v) = self.runtime.version(api::VersionRequest::default()).await
        {
            self.runtime_version = format!("{}://{}", v.runtime_name, v.runtime_version);
        }
        let answer = self
            .runtime
            .status(api::StatusRequest { verbose: false })
            .await
            .map_err(|s| format!("{}: {}", s.code(), s.message()));
        let readiness = status::readiness(&answer);
        if let Some(note) = &readiness.degraded
            && !self.warned_degraded
        {
            self.warned_degraded = true;
            tracing::warn!(node = %self.opts.node_name,
                "the node is Ready with a degraded runtime: {note}");
        }
        (readiness, answer.ok())
    }

    /// Computes the status and patches it when it changed or is due; returns the error of
    /// the patch, if one was sent and failed.
    pub async fn sync_status(&mut self) -> Result<(), Failure> {
        if self.node.is_none() {
            return Ok(());
        }
        let (readiness, runtime_status) = self.runtime_state().await;
        let measurements = measure(&self.opts.root);
        let base = self
            .sent
            .clone()
            .or_else(|| self.previous_for_transitions.clone());
        let next = build_node_status(&StatusInputs {
            opts: &self.opts,
            measurements: &measurements,
            facts: &self.facts,
            runtime_version: &self.runtime_version,
            readiness: &readiness,
            runtime_status: runtime_status.as_ref(),
            thresholds: Thresholds::default(),
            previous: base.as_ref(),
            now: self.clock.wall(),
        });
        let due = self
            .last_report
            .is_none_or(|t| self.clock.now().duration_since(t) >= STATUS_REPORT_INTERVAL);
        let name = self.opts.node_name.clone();
        let nodes: Api<Node> = Api::all(self.client.clone());
        if !due && !status::changed(self.sent.as_ref(), &next) && !self.api_disagrees(&next).await {
            return Ok(());
        }
        // Strategic merge: conditions and addresses merge by type, so conditions other
        // components own survive. No GET first: the Node authorizer forbids reading status.
        let patch = serde_json::json!({ "status": next });
        let outcome = call(
            "patch",
            format!("nodes/{name}/status"),
            nodes.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch)),
        )
        .await;
        match outcome {
            Ok(updated) => {
                let before = self.sent.take().or_else(|| {
                    // After adoption, events compare with what the API last showed.
                    self.previous_for_transitions.take()
                });
                for event in events::transitions(&name, before.as_ref(), &next) {
                    self.publish(&event).await;
                }
                self.sent = Some(next);
                self.last_report = Some(self.clock.now());
                self.node = Some(updated.clone());
                self.node_tx.send_replace(Some(updated));
                Ok(())
            }
            Err(failure) => {
                if failure.code() == Some(404) {
                    // The Node was deleted under us: register it again (as kubelet does).
                    tracing::warn!(node = %name, "the Node is gone from the API; registering it again");
                    self.node = None;
                    self.lease_exists = false;
                }
                Err(failure)
            }
        }
    }

    /// What the API shows may differ from what was sent last: as kubelet does (a GET from the
    /// API server's cache every status tick), compare our conditions with it. A failed read
    /// changes nothing; a Node gone is a difference (the patch then registers it again).
    async fn api_disagrees(&self, next: &NodeStatus) -> bool {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let read = call(
            "get",
            format!("nodes/{}", self.opts.node_name),
            nodes.get_with(&self.opts.node_name, &GetParams::any()),
        )
        .await;
        match read {
            Ok(node) => status::api_disagrees(node.status.as_ref(), next),
            Err(failure) => failure.code() == Some(404),
        }
    }

    pub async fn renew_lease(&mut self) -> Result<(), Failure> {
        let Some(node) = self.node.clone() else {
            return Ok(());
        };
        lease::renew(
            &self.client,
            &node,
            self.clock.wall(),
            &mut self.lease_exists,
        )
        .await
    }

    async fn publish(&mut self, event: &events::NodeEvent) {
        let outcome =
            match tokio::time::timeout(super::failure::REQUEST_TIMEOUT, self.events.publish(event))
                .await
            {
                Ok(Ok(())) => Ok(()),
                Ok(Err(err)) => Err(Failure {
                    verb: "create",
                    resource: "events (namespace default)".to_string(),
                    cause: super::failure::Cause::Api(err),
                }),
                Err(_) => Err(Failure {
                    verb: "create",
                    resource: "events (namespace default)".to_string(),
                    cause: super::failure::Cause::TimedOut(super::failure::REQUEST_TIMEOUT),
                }),
            };
        self.note("event", &outcome);
    }

    /// The "Starting kubelet." event, once the API answers.
    pub async fn announce_start(&mut self) {
        if !self.started_event {
            self.started_event = true;
            self.publish(&events::starting()).await;
        }
    }

    /// Runs until `stop` turns true: registration first (with back-off), then status and
    /// lease, each on its own schedule (10 s, sooner with back-off after a failure). A stop
    /// interrupts an in-flight request (each is idempotent).
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let now = self.clock.now();
        let mut schedule = if self.registered() {
            Schedule::new(now + STATUS_UPDATE_INTERVAL, now + lease::RENEW_INTERVAL)
        } else {
            // Registration failed at start: retry after the first back-off step.
            let at = now + Duration::from_millis(200);
            Schedule::new(at, at)
        };
        loop {
            let wake = schedule.next_status.min(schedule.next_lease);
            tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => return,
                _ = tokio::time::sleep_until(wake) => {}
            }
            tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => return,
                _ = self.tick(&mut schedule) => {}
            }
        }
    }

    async fn tick(&mut self, schedule: &mut Schedule) {
        if !self.registered() {
            let outcome = self.register().await;
            self.note("node registration", &outcome);
            if outcome.is_err() {
                let at = self.clock.now() + schedule.register.next_delay();
                schedule.next_status = at;
                schedule.next_lease = at;
                return;
            }
            schedule.register.reset();
            self.announce_start().await;
        }
        let now = self.clock.now();
        if schedule.next_status <= now {
            let outcome = self.sync_status().await;
            schedule.next_status = self.clock.now()
                + match &outcome {
                    Ok(()) => {
                        schedule.status.reset();
                        STATUS_UPDATE_INTERVAL
                    }
                    Err(_) => schedule.status.next_delay(),
                };
            self.note("node status update", &outcome);
        }
        if schedule.next_lease <= now {
            let outcome = self.renew_lease().await;
            schedule.next_lease = self.clock.now()
                + match &outcome {
                    Ok(()) => {
                        schedule.lease.reset();
                        lease::RENEW_INTERVAL
                    }
                    Err(_) => schedule.lease.next_delay(),
                };
            self.note("lease renewal", &outcome);
        }
    }
}

/// When the loop does what next, and the back-off of each.
struct Schedule {
    next_status: Instant,
    next_lease: Instant,
    register: Backoff,
    status: Backoff,
    lease: Backoff,
}

impl Schedule {
    fn new(next_status: Instant, next_lease: Instant) -> Schedule {
        Schedule {
            next_status,
            next_lease,
            register: Backoff::kubelet(),
            status: Backoff::kubelet(),
            lease: Backoff::kubelet(),
        }
    }
}
