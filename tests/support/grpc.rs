//! Test support for the CRI gRPC server and client: a message filler that sets every field of a
//! CRI message (from the proto's descriptors), a fake runtime + image service that records each
//! call and answers deterministically from the request, and a server on a temp-dir socket.
#![allow(dead_code)]

use futures::StreamExt;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, Value};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::server::{CriListener, ServeError};
use runp::cri::{CriResult, EventStream, ImageService, RuntimeService, api};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;
use tonic::Status;

/// Hang guard for waits in tests (never a performance assertion).
pub const HANG_GUARD: Duration = Duration::from_secs(20);

/// Builds CRI messages with every field set (nested messages, lists, maps, enums) from a seed.
pub struct Filler {
    pool: DescriptorPool,
}

const MAX_DEPTH: u32 = 8;

impl Filler {
    pub fn load() -> Filler {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cri/proto");
        let files =
            protox::compile([format!("{dir}/api.proto")], [dir]).expect("compile api.proto");
        let pool = DescriptorPool::from_file_descriptor_set(files).expect("descriptor pool");
        Filler { pool }
    }

    /// A `T` (a top-level `runtime.v1` message) with every field set.
    pub fn fill<T: Message + Default>(&self, seed: u64) -> T {
        self.fill_with(seed, &[])
    }

    /// Like [`Filler::fill`], then sets the named top-level string fields (ids).
    pub fn fill_with<T: Message + Default>(&self, seed: u64, overrides: &[(&str, &str)]) -> T {
        let type_name = std::any::type_name::<T>();
        let short = type_name.rsplit("::").next().unwrap_or(type_name);
        let desc = self
            .pool
            .get_message_by_name(&format!("runtime.v1.{short}"))
            .unwrap_or_else(|| panic!("no descriptor for {type_name}"));
        let mut msg = fill_message(&desc, seed, 0);
        for (name, value) in overrides {
            if let Some(field) = desc.get_field_by_name(name) {
                msg.set_field(&field, Value::String((*value).to_owned()));
            }
        }
        T::decode(msg.encode_to_vec().as_slice()).expect("filled message decodes")
    }
}

fn fill_message(desc: &MessageDescriptor, seed: u64, depth: u32) -> DynamicMessage {
    let mut msg = DynamicMessage::new(desc.clone());
    for field in desc.fields() {
        let s = seed
            .wrapping_mul(31)
            .wrapping_add(u64::from(field.number()));
        let value = if field.is_map() {
            let Kind::Message(entry) = field.kind() else {
                unreachable!("map fields are entry messages")
            };
            let (key, val) = (entry.map_entry_key_field(), entry.map_entry_value_field());
            let entries: Option<HashMap<MapKey, Value>> = (0..2)
                .map(|i| {
                    Some((
                        map_key(&key.kind(), s + i, i),
                        single(&val.kind(), s + i, depth, val.name())?,
                    ))
                })
                .collect();
            entries.map(Value::Map)
        } else if field.is_list() {
            let items: Option<Vec<Value>> = (0..2)
                .map(|i| single(&field.kind(), s + i, depth, field.name()))
                .collect();
            items.map(Value::List)
        } else {
            single(&field.kind(), s, depth, field.name())
        };
        if let Some(value) = value {
            msg.set_field(&field, value);
        }
    }
    msg
}

fn map_key(kind: &Kind, s: u64, index: u64) -> MapKey {
    match kind {
        Kind::String => MapKey::String(format!("key{index}-{s}")),
        Kind::Bool => MapKey::Bool(index == 0),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => MapKey::I32(index as i32 + 1),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => MapKey::I64(index as i64 + 1),
        Kind::Uint32 | Kind::Fixed32 => MapKey::U32(index as u32 + 1),
        _ => MapKey::U64(index + 1),
    }
}

fn single(kind: &Kind, s: u64, depth: u32, name: &str) -> Option<Value> {
    let small = s % 100_000 + 1;
    Some(match kind {
        Kind::Double => Value::F64(small as f64 + 0.5),
        Kind::Float => Value::F32((small % 1000) as f32 + 0.25),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(small as i32),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(small as i64),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(small as u32),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(small),
        Kind::Bool => Value::Bool(true),
        Kind::String => Value::String(format!("{name}-{s}")),
        Kind::Bytes => Value::Bytes(format!("{name}-{s}\0\u{ff}").into_bytes().into()),
        Kind::Enum(e) => {
            let numbers: Vec<i32> = e.values().map(|v| v.number()).filter(|n| *n != 0).collect();
            Value::EnumNumber(if numbers.is_empty() {
                0
            } else {
                numbers[(s % numbers.len() as u64) as usize]
            })
        }
        Kind::Message(m) if depth < MAX_DEPTH => Value::Message(fill_message(m, s, depth + 1)),
        Kind::Message(_) => return None,
    })
}

/// One call the fake answered: the request and the response (or status) as wire bytes.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: &'static str,
    pub request: Vec<u8>,
    pub response: Result<Vec<u8>, Status>,
}

impl Call {
    pub fn request<T: Message + Default>(&self) -> T {
        T::decode(self.request.as_slice()).expect("recorded request decodes")
    }
    pub fn response<T: Message + Default>(&self) -> T {
        let bytes = self.response.as_ref().expect("the recorded call succeeded");
        T::decode(bytes.as_slice()).expect("recorded response decodes")
    }
}

#[derive(Default)]
struct FakeState {
    sandboxes: BTreeSet<String>,
    containers: BTreeSet<String>,
    images: BTreeSet<String>,
    calls: Vec<Call>,
    emitted: Vec<api::ContainerEventResponse>,
    failures: HashMap<&'static str, Status>,
    hanging: HashSet<&'static str>,
}

/// Which id a call needs to exist; unknown ones are `NotFound`.
enum Needs<'a> {
    Nothing,
    Sandbox(&'a str),
    Container(&'a str),
}

/// Fake CRI runtime + image service: records every call, answers from the request (filled
/// responses seeded by the request bytes), `NotFound` for unknown sandbox/container ids, and
/// emits a container event on create/start/stop/remove.
pub struct FakeCri {
    filler: Filler,
    state: Mutex<FakeState>,
    events: broadcast::Sender<api::ContainerEventResponse>,
    dropped_hung_calls: Arc<AtomicUsize>,
}

impl FakeCri {
    pub fn new() -> FakeCri {
        FakeCri {
            filler: Filler::load(),
            state: Mutex::default(),
            events: broadcast::channel(64).0,
            dropped_hung_calls: Arc::default(),
        }
    }

    pub fn filler(&self) -> &Filler {
        &self.filler
    }

    fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    pub fn last_call(&self) -> Call {
        self.state()
            .calls
            .last()
            .cloned()
            .expect("the fake saw a call")
    }

    /// Events emitted so far, in order.
    pub fn emitted(&self) -> Vec<api::ContainerEventResponse> {
        self.state().emitted.clone()
    }

    /// Makes every later call of `method` fail with `status`.
    pub fn fail(&self, method: &'static str, status: Status) {
        self.state().failures.insert(method, status);
    }

    /// Makes every later call of `method` never answer.
    pub fn hang(&self, method: &'static str) {
        self.state().hanging.insert(method);
    }

    /// How many never-answering calls were cancelled (their futures dropped).
    pub fn dropped_hung_calls(&self) -> usize {
        self.dropped_hung_calls.load(Ordering::SeqCst)
    }

    fn emit(&self, state: &mut FakeState, container_id: &str, kind: api::ContainerEventType) {
        let seed = state.emitted.len() as u64 + 1000;
        let mut event: api::ContainerEventResponse = self.filler.fill(seed);
        event.container_id = container_id.to_owned();
        event.container_event_type = kind as i32;
        state.emitted.push(event.clone());
        let _ = self.events.send(event);
    }

    /// The common path of every unary call. `answer` returns `None` for "a filled response".
    async fn call<Req: Message, Resp: Message + Default>(
        &self,
        method: &'static str,
        req: &Req,
        needs: Needs<'_>,
        answer: impl FnOnce(&mut FakeState) -> Option<Resp>,
    ) -> CriResult<Resp> {
        let request = req.encode_to_vec();
        if self.state().hanging.contains(method) {
            let _guard = DropCounter(self.dropped_hung_calls.clone());
            std::future::pending::<()>().await;
        }
        let mut state = self.state();
        let result = if let Some(status) = state.failures.get(method) {
            Err(status.clone())
        } else {
            match needs {
                Needs::Sandbox(id) if !state.sandboxes.contains(id) => {
                    Err(Status::not_found(format!("pod sandbox {id:?} not found")))
                }
                Needs::Container(id) if !state.containers.contains(id) => {
                    Err(Status::not_found(format!("container {id:?} not found")))
                }
                _ => Ok(answer(&mut state).unwrap_or_else(|| {
                    let mut hasher = DefaultHasher::new();
                    (method, &request).hash(&mut hasher);
                    self.filler.fill(hasher.finish() % 1_000_000)
                })),
            }
        };
        state.calls.push(Call {
            method,
            request,
            response: result
                .as_ref()
                .map(Message::encode_to_vec)
                .map_err(Clone::clone),
        });
        result
    }
}

struct DropCounter(Arc<AtomicUsize>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn name_of(metadata: Option<&impl HasName>) -> String {
    metadata.map_or_else(|| "unnamed".to_owned(), |m| m.name().to_owned())
}

trait HasName {
    fn name(&self) -> &str;
}
impl HasName for api::PodSandboxMetadata {
    fn name(&self) -> &str {
        &self.name
    }
}
impl HasName for api::ContainerMetadata {
    fn name(&self) -> &str {
        &self.name
    }
}

/// Implements a CRI trait for [`FakeCri`]: each listed RPC answers a filled response after
/// checking that the id it `Needs` exists; `$extra` holds the calls with their own behaviour.
macro_rules! fake_impl {
    ($service:ident { $($method:ident($req:ident) -> $resp:ident, $needs:ident $(($field:ident))?;)* }
     $($extra:tt)*) => {
        #[async_trait::async_trait]
        impl $service for FakeCri {
            $(
                async fn $method(&self, req: api::$req) -> CriResult<api::$resp> {
                    let needs = Needs::$needs $((&req.$field))?;
                    self.call(stringify!($method), &req, needs, |_| None).await
                }
            )*
            $($extra)*
        }
    };
}

fake_impl! { RuntimeService {
    version(VersionRequest) -> VersionResponse, Nothing;
    stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse, Sandbox(pod_sandbox_id);
    pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse, Sandbox(pod_sandbox_id);
    list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse, Nothing;
    list_containers(ListContainersRequest) -> ListContainersResponse, Nothing;
    container_status(ContainerStatusRequest) -> ContainerStatusResponse, Container(container_id);
    update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse,
        Container(container_id);
    reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse, Container(container_id);
    exec_sync(ExecSyncRequest) -> ExecSyncResponse, Container(container_id);
    exec(ExecRequest) -> ExecResponse, Container(container_id);
    attach(AttachRequest) -> AttachResponse, Container(container_id);
    port_forward(PortForwardRequest) -> PortForwardResponse, Sandbox(pod_sandbox_id);
    container_stats(ContainerStatsRequest) -> ContainerStatsResponse, Container(container_id);
    list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse, Nothing;
    pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse, Sandbox(pod_sandbox_id);
    list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse, Nothing;
    update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse, Nothing;
    status(StatusRequest) -> StatusResponse, Nothing;
    runtime_config(RuntimeConfigRequest) -> RuntimeConfigResponse, Nothing;
    checkpoint_container(CheckpointContainerRequest) -> CheckpointContainerResponse, Container(container_id);
    list_metric_descriptors(ListMetricDescriptorsRequest) -> ListMetricDescriptorsResponse, Nothing;
    list_pod_sandbox_metrics(ListPodSandboxMetricsRequest) -> ListPodSandboxMetricsResponse, Nothing;
}
    async fn run_pod_sandbox(&self, req: api::RunPodSandboxRequest) -> CriResult<api::RunPodSandboxResponse> {
        let id = format!("pod-{}", name_of(req.config.as_ref().and_then(|c| c.metadata.as_ref())));
        self.call("run_pod_sandbox", &req, Needs::Nothing, |state| {
            state.sandboxes.insert(id.clone());
            Some(api::RunPodSandboxResponse { pod_sandbox_id: id })
        })
        .await
    }
    async fn remove_pod_sandbox(&self, req: api::RemovePodSandboxRequest) -> CriResult<api::RemovePodSandboxResponse> {
        // Idempotent, as the CRI requires.
        self.call("remove_pod_sandbox", &req, Needs::Nothing, |state| {
            state.sandboxes.remove(&req.pod_sandbox_id);
            None
        })
        .await
    }
    async fn create_container(&self, req: api::CreateContainerRequest) -> CriResult<api::CreateContainerResponse> {
        let id = format!("ctr-{}", name_of(req.config.as_ref().and_then(|c| c.metadata.as_ref())));
        self.call("create_container", &req, Needs::Sandbox(&req.pod_sandbox_id), |state| {
            state.containers.insert(id.clone());
            self.emit(state, &id, api::ContainerEventType::ContainerCreatedEvent);
            Some(api::CreateContainerResponse { container_id: id })
        })
        .await
    }
    async fn start_container(&self, req: api::StartContainerRequest) -> CriResult<api::StartContainerResponse> {
        self.call("start_container", &req, Needs::Container(&req.container_id), |state| {
            self.emit(state, &req.container_id, api::ContainerEventType::ContainerStartedEvent);
            None
        })
        .await
    }
    async fn stop_container(&self, req: api::StopContainerRequest) -> CriResult<api::StopContainerResponse> {
        self.call("stop_container", &req, Needs::Container(&req.container_id), |state| {
            self.emit(state, &req.container_id, api::ContainerEventType::ContainerStoppedEvent);
            None
        })
        .await
    }
    async fn remove_container(&self, req: api::RemoveContainerRequest) -> CriResult<api::RemoveContainerResponse> {
        self.call("remove_container", &req, Needs::Nothing, |state| {
            if state.containers.remove(&req.container_id) {
                self.emit(state, &req.container_id, api::ContainerEventType::ContainerDeletedEvent);
            }
            None
        })
        .await
    }
    async fn get_container_events(&self, req: api::GetEventsRequest) -> CriResult<EventStream> {
        self.call::<_, ()>("get_container_events", &req, Needs::Nothing, |_| Some(())).await?;
        let events = tokio_stream::wrappers::BroadcastStream::new(self.events.subscribe());
        Ok(events.map(|event| event.map_err(|lag| Status::data_loss(lag.to_string()))).boxed())
    }
}

fake_impl! { ImageService {
    list_images(ListImagesRequest) -> ListImagesResponse, Nothing;
    image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse, Nothing;
}
    async fn image_status(&self, req: api::ImageStatusRequest) -> CriResult<api::ImageStatusResponse> {
        let name = image_name(req.image.as_ref());
        // The CRI answers an unknown image with an empty status, not an error.
        self.call("image_status", &req, Needs::Nothing, |state| {
            (!state.images.contains(&name)).then(api::ImageStatusResponse::default)
        })
        .await
    }
    async fn pull_image(&self, req: api::PullImageRequest) -> CriResult<api::PullImageResponse> {
        let name = image_name(req.image.as_ref());
        self.call("pull_image", &req, Needs::Nothing, |state| {
            let mut hasher = DefaultHasher::new();
            name.hash(&mut hasher);
            state.images.insert(name);
            Some(api::PullImageResponse { image_ref: format!("sha256:{:016x}", hasher.finish()) })
        })
        .await
    }
    async fn remove_image(&self, req: api::RemoveImageRequest) -> CriResult<api::RemoveImageResponse> {
        let name = image_name(req.image.as_ref());
        self.call("remove_image", &req, Needs::Nothing, |state| {
            state.images.remove(&name);
            None
        })
        .await
    }
}

fn image_name(spec: Option<&api::ImageSpec>) -> String {
    spec.map(|i| i.image.clone()).unwrap_or_default()
}

/// A CRI server over a [`FakeCri`] on a socket in its own temp dir.
pub struct TestServer {
    pub fake: Arc<FakeCri>,
    pub endpoint: CriEndpoint,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServeError>>>,
}

impl TestServer {
    /// Serves on `<tempdir>/run/cri.sock` (the `run/` dir does not exist beforehand).
    pub async fn start() -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let endpoint = CriEndpoint::Unix(dir.path().join("run/cri.sock"));
        Self::start_on(dir, endpoint, Arc::new(FakeCri::new())).await
    }

    pub async fn start_on(
        dir: tempfile::TempDir,
        endpoint: CriEndpoint,
        fake: Arc<FakeCri>,
    ) -> TestServer {
        let listener = CriListener::bind(&endpoint)
            .await
            .expect("bind the CRI endpoint");
        let endpoint = listener.local_endpoint();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(listener.serve(fake.clone(), fake.clone(), async move {
            let _ = stopped.await;
        }));
        TestServer {
            fake,
            endpoint,
            dir,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.endpoint
            .unix_path()
            .expect("a unix endpoint")
            .to_owned()
    }

    /// Signals shutdown and waits (hang-guarded) for the server to return.
    pub async fn shutdown(&mut self) -> Result<(), ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = self.task.take().expect("server still running");
        tokio::time::timeout(HANG_GUARD, task)
            .await
            .expect("server stopped within the hang guard")
            .expect("server task did not panic")
    }
}

/// Client options for tests: kubelet's defaults with a short connect budget.
pub fn test_options() -> runp::cri::client::RemoteOptions {
    runp::cri::client::RemoteOptions {
        connect_timeout: Duration::from_secs(10),
        ..Default::default()
    }
}
