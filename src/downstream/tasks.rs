//! 2025-11-25 tasks through the gateway.
//!
//! A task-augmented `tools/call` is sent to the tool's mount as written
//! (with its `task`), and the task the upstream creates gets a
//! gateway-wide id, `<mount>/<upstream id>`, so two upstreams' ids never
//! collide. The session keeps which task ids it created ([`TaskTable`]);
//! `tasks/get`, `tasks/result` and `tasks/cancel` are routed by that table
//! to the mount's upstream under the upstream's own id, and every task id
//! in their answers (`taskId`, related-task `_meta`) is mapped back.
//! `tasks/list` asks each mount this session has tasks on and lists only
//! this session's own, under the gateway's cursor. A task id this session
//! did not create is unknown to it, so one client can never read or
//! cancel another's task on a shared upstream. A task also belongs to the
//! upstream session that created it: once that session has ended (a
//! restart), the task is unknown too, since the next session may give its
//! id to another client's task.
//!
//! rmcp models the later SEP-2663 tasks, not these: the HTTP edge keeps a
//! `tools/call`'s `task` ([`task_augmentation`]), [`declare_tasks`] adds
//! the capability to the `initialize` answer, and the upstream's answers
//! are taken as written (`UpstreamSession::request_raw`).

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, CustomRequest, ErrorCode, GetExtensions, GetMeta,
    ServerJsonRpcMessage, ServerResult,
};
use rmcp::{service::RequestContext, ErrorData, RoleServer};
use serde_json::{json, Map, Value};

use super::{handler::forwarded_meta, lock, DownstreamSession, RouteError};
use crate::{
    catalog,
    gateway::{CallInFlight, Mount},
    naming::{MountName, Namespace},
    rewrite,
    upstream::{relay::set_related_task, UpstreamSession},
};

/// The oldest protocol version with tasks.
const TASKS_SINCE: &str = "2025-11-25";

/// At most this many upstream `tasks/list` pages are read per mount.
const MAX_LIST_PAGES: usize = 100;

/// The params of a task-augmented `tools/call` as the client wrote them,
/// kept by the HTTP edge as a request extension: rmcp's
/// `CallToolRequestParams` has no `task`.
#[derive(Debug, Clone)]
pub struct TaskAugmentation(pub Map<String, Value>);

/// The params of `body`, if it is a task-augmented `tools/call` of a
/// client that speaks tasks: its request names (`MCP-Protocol-Version`)
/// 2025-11-25 or later. To a client of an earlier version `task` means
/// nothing, and it is ignored, as before tasks.
pub fn task_augmentation(body: &[u8], protocol_version: Option<&[u8]>) -> Option<TaskAugmentation> {
    if protocol_version.is_none_or(|version| version < TASKS_SINCE.as_bytes()) {
        return None;
    }
    // Cheap first: almost no body mentions it.
    if !body.windows(6).any(|window| window == b"\"task\"") {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Message {
        method: Option<String>,
        params: Option<Map<String, Value>>,
    }
    let message: Message = serde_json::from_slice(body).ok()?;
    let params = message.params?;
    // Any `task` but `null`: one that is not a `TaskMetadata` is refused
    // where it is handled (`task_metadata_problem`), not run as a plain
    // call whose client expects a task.
    let augmented = message.method.as_deref() == Some("tools/call")
        && params.get("task").is_some_and(|task| !task.is_null());
    augmented.then_some(TaskAugmentation(params))
}

/// What is wrong with a `tools/call`'s `task`, if it is not a
/// `TaskMetadata` (an object whose `ttl`, if any, is a number of
/// milliseconds, at least 0).
fn task_metadata_problem(task: &Value) -> Option<String> {
    let Value::Object(task) = task else {
        return Some(format!(
            "`task` must be an object (TaskMetadata), not {}",
            crate::http::json_kind(task)
        ));
    };
    match task.get("ttl") {
        None | Some(Value::Null) => None,
        Some(Value::Number(ttl)) if ttl.as_f64().is_some_and(|ttl| ttl >= 0.0) => None,
        Some(Value::Number(ttl)) => Some(format!(
            "`task.ttl` must be a number of milliseconds, at least 0, not {ttl}"
        )),
        Some(other) => Some(format!(
            "`task.ttl` must be a number of milliseconds, at least 0, not {}",
            crate::http::json_kind(other)
        )),
    }
}

/// Whether any catalog has listed a tool with an `execution`. Until one
/// has, `tools/list` keeps rmcp's typed path.
#[derive(Debug, Default)]
pub struct TaskToolsListed(AtomicBool);

impl TaskToolsListed {
    pub fn saw_one(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn any(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Hands the requests rmcp's model would misread to the session's
/// custom-request handler, with their params as the client wrote them:
/// a task-augmented `tools/call` (its `task` kept by the edge),
/// `tasks/get` and `tasks/cancel` (which rmcp takes for SEP-2663's), and,
/// once some tool declares an `execution`, `tools/list`.
pub fn as_custom_request(message: ClientJsonRpcMessage, task_tools: bool) -> ClientJsonRpcMessage {
    let ClientJsonRpcMessage::Request(mut request) = message else {
        return message;
    };
    let (method, params) = match &mut request.request {
        ClientRequest::CallToolRequest(call) => {
            let augmented = call
                .extensions
                .get_mut::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.remove::<TaskAugmentation>());
            match augmented {
                Some(TaskAugmentation(params)) => ("tools/call", Some(Value::Object(params))),
                None => return ClientJsonRpcMessage::Request(request),
            }
        }
        ClientRequest::GetTaskRequest(get) => ("tasks/get", serde_json::to_value(&get.params).ok()),
        ClientRequest::CancelTaskRequest(cancel) => {
            ("tasks/cancel", serde_json::to_value(&cancel.params).ok())
        }
        ClientRequest::ListToolsRequest(list) if task_tools => (
            "tools/list",
            list.params
                .as_ref()
                .and_then(|params| serde_json::to_value(params).ok()),
        ),
        _ => return ClientJsonRpcMessage::Request(request),
    };
    let meta = request.request.get_meta().clone();
    let mut custom = CustomRequest::new(method, params);
    custom.extensions = request.request.extensions().clone();
    custom.extensions.insert(meta);
    request.request = ClientRequest::CustomRequest(custom);
    ClientJsonRpcMessage::Request(request)
}

/// Adds the gateway's `tasks` capability to an `initialize` answer that
/// negotiated a version with tasks (rmcp's `ServerCapabilities` has no
/// such field). The gateway itself answers `tasks/list` and
/// `tasks/cancel` and accepts task-augmented `tools/call`; whether a tool
/// runs as a task is its `execution.taskSupport`, as its upstream said.
pub fn declare_tasks(message: ServerJsonRpcMessage) -> ServerJsonRpcMessage {
    let ServerJsonRpcMessage::Response(mut response) = message else {
        return message;
    };
    let ServerResult::InitializeResult(init) = &response.result else {
        return ServerJsonRpcMessage::Response(response);
    };
    if init.protocol_version.as_str() < TASKS_SINCE {
        return ServerJsonRpcMessage::Response(response);
    }
    let Ok(mut result) = serde_json::to_value(init) else {
        return ServerJsonRpcMessage::Response(response);
    };
    if let Some(capabilities) = result
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    {
        capabilities.insert(
            "tasks".to_owned(),
            json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } }),
        );
    }
    response.result = ServerResult::CustomResult(rmcp::model::CustomResult(result));
    ServerJsonRpcMessage::Response(response)
}

/// Adds each listed tool's `execution` (kept by discovery) to a
/// `tools/list` answer; `None` when no tool on the page has one.
pub(crate) fn with_execution(
    result: &rmcp::model::ListToolsResult,
    execution: &HashMap<String, Value>,
) -> Option<Value> {
    if execution.is_empty()
        || !result
            .tools
            .iter()
            .any(|tool| execution.contains_key(tool.name.as_ref()))
    {
        return None;
    }
    // As rmcp's handler sends a typed page: no `resultType`, which only
    // 2026-07-28 has (the gateway offers no newer than 2025-11-25).
    let mut value = serde_json::to_value(result).ok()?;
    if let Some(page) = value.as_object_mut() {
        page.remove("resultType");
    }
    for tool in value.get_mut("tools")?.as_array_mut()? {
        let Some(tool) = tool.as_object_mut() else {
            continue;
        };
        let declared = tool
            .get("name")
            .and_then(Value::as_str)
            .and_then(|name| execution.get(name));
        if let Some(declared) = declared {
            tool.insert("execution".to_owned(), declared.clone());
        }
    }
    Some(value)
}

/// Where one of this session's tasks lives.
#[derive(Debug, Clone, PartialEq)]
struct TaskHome {
    mount: MountName,
    upstream_id: String,
    /// The upstream session that created it ([`UpstreamSession::id`]):
    /// once that one has ended (a restart, a reopened per-session
    /// upstream), the task is gone, and its id may name another session's
    /// task in the next one.
    upstream_session: u64,
    /// When its TTL, as the upstream declared it, runs out (`None`:
    /// unlimited). Past it the upstream may have deleted the task.
    expires: Option<Instant>,
    /// Once the task is known to be gone (its upstream no longer knows
    /// it, or the upstream session that ran it has ended): the answer
    /// that said so, given again to every later request for it. A client
    /// polling `tasks/get` then reads one reason, not "gone" once and
    /// "unknown task" after.
    gone: Option<ErrorData>,
}

impl TaskHome {
    /// Whether it lives on upstream session `upstream_session`
    /// ([`UpstreamSession::id`]).
    fn lives_on(&self, upstream_session: u64) -> bool {
        self.upstream_session == upstream_session
    }
}

/// At most this many tasks are remembered per session; the oldest go
/// first (their ids become unknown to the session).
const TASKS_PER_SESSION: usize = 1024;

/// One session's tasks on one mount: upstream id → home and gateway id.
type MountTasks = HashMap<String, (TaskHome, String)>;

/// The tasks one session created, by the id the gateway gave each.
#[derive(Debug, Default)]
pub(crate) struct TaskTable(std::sync::Mutex<Homes>);

#[derive(Debug, Default)]
struct Homes {
    by_id: HashMap<String, TaskHome>,
    /// Ids in creation order, for the bound.
    order: VecDeque<String>,
}

impl TaskTable {
    /// Whether every task is past its TTL at `now` (or there is none):
    /// sleeping would then lose nothing the client may count on.
    ///
    /// Expired tasks stay known while the session is awake: an upstream
    /// may keep a task longer (some count the TTL from completion), and a
    /// client polling it keeps its session awake. Only a session idle past
    /// all its tasks' TTLs sleeps and forgets them; before, one task kept
    /// a session awake (~55 KiB) for good.
    ///
    /// A task whose upstream session has ended (`lives` says which still
    /// run, by mount and [`UpstreamSession::id`]) is gone whatever its TTL:
    /// a task with none kept its session awake after its upstream
    /// restarted, until the idle timeout.
    pub(crate) fn all_expired(
        &self,
        now: Instant,
        lives: impl Fn(&MountName, u64) -> bool,
    ) -> bool {
        lock(&self.0).by_id.values().all(|home| {
            home.gone.is_some()
                || home.expires.is_some_and(|expires| expires <= now)
                || !lives(&home.mount, home.upstream_session)
        })
    }

    /// The mounts and upstream sessions ([`UpstreamSession::id`]) this
    /// session's tasks live on.
    pub(crate) fn homes(&self) -> Vec<(MountName, u64)> {
        let mut homes: Vec<(MountName, u64)> = lock(&self.0)
            .by_id
            .values()
            .map(|home| (home.mount.clone(), home.upstream_session))
            .collect();
        homes.sort_by(|a, b| (a.0.as_str(), a.1).cmp(&(b.0.as_str(), b.1)));
        homes.dedup();
        homes
    }

    fn add(
        &self,
        mount: &MountName,
        upstream_id: &str,
        upstream_session: u64,
        ttl: Option<Duration>,
    ) -> String {
        let id = format!("{mount}/{upstream_id}");
        let mut homes = lock(&self.0);
        let home = TaskHome {
            mount: mount.clone(),
            upstream_id: upstream_id.to_owned(),
            upstream_session,
            expires: ttl.and_then(|ttl| Instant::now().checked_add(ttl)),
            gone: None,
        };
        if homes.by_id.insert(id.clone(), home).is_none() {
            homes.order.push_back(id.clone());
        }
        while homes.order.len() > TASKS_PER_SESSION {
            if let Some(oldest) = homes.order.pop_front() {
                homes.by_id.remove(&oldest);
            }
        }
        id
    }

    fn get(&self, id: &str) -> Option<TaskHome> {
        lock(&self.0).by_id.get(id).cloned()
    }

    /// Marks task `id` gone, `answer` being what its requests are told
    /// from now on. It stays among the session's remembered tasks (and
    /// their bound) but is no longer listed, and keeps no session awake.
    fn mark_gone(&self, id: &str, answer: ErrorData) {
        if let Some(home) = lock(&self.0).by_id.get_mut(id) {
            home.gone.get_or_insert(answer);
        }
    }

    /// This session's tasks on each mount (upstream id → home and gateway
    /// id), by mount name: `tasks/list` pages need the same order every
    /// time. Tasks known to be gone are left out.
    fn by_mount(&self) -> BTreeMap<String, (MountName, MountTasks)> {
        let mut mounts: BTreeMap<String, (MountName, MountTasks)> = BTreeMap::new();
        let homes = lock(&self.0);
        let live = homes.by_id.iter().filter(|(_, home)| home.gone.is_none());
        for (id, home) in live {
            mounts
                .entry(home.mount.as_str().to_owned())
                .or_insert_with(|| (home.mount.clone(), HashMap::new()))
                .1
                .insert(home.upstream_id.clone(), (home.clone(), id.clone()));
        }
        mounts
    }
}

/// The TTL a task-creating answer declares (`task.ttl`, milliseconds;
/// absent or `null`: unlimited).
fn task_ttl(created: &Value) -> Option<Duration> {
    created
        .pointer("/task/ttl")
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
}

/// Replaces the task id at `task` (a `Task` object) and in related-task
/// `_meta` with the gateway's.
fn rename_task(task: &mut Value, id: &str) {
    if let Some(task) = task.as_object_mut() {
        if task.contains_key("taskId") {
            task.insert("taskId".to_owned(), Value::String(id.to_owned()));
        }
    }
}

fn rename_related_task(result: &mut Value, id: &str) {
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        set_related_task(meta, id);
    }
}

fn unknown_task(id: &str) -> ErrorData {
    RouteError::UnknownTask(id.to_owned()).into_mcp_error()
}

/// The answer for task `id`, on `mount`, whose upstream session has ended.
fn gone_task(id: &str, mount: &MountName) -> ErrorData {
    RouteError::TaskGone {
        id: id.to_owned(),
        mount: mount.clone(),
    }
    .into_mcp_error()
}

fn task_id_param(params: &Option<Value>) -> Result<String, ErrorData> {
    params
        .as_ref()
        .and_then(|params| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ErrorData::invalid_params("params.taskId (a string) is required", None))
}

impl DownstreamSession {
    /// `tools/call` with `task`: the upstream creates the task; the client
    /// gets it under the gateway's id.
    pub(crate) async fn call_tool_as_task(
        &self,
        params: Option<Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let Some(Value::Object(mut params)) = params else {
            return Err(ErrorData::invalid_params("tools/call needs params", None));
        };
        if let Some(problem) = params.get("task").and_then(task_metadata_problem) {
            return Err(ErrorData::invalid_params(
                format!("invalid params for tools/call: {problem}"),
                None,
            ));
        }
        let tool_name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.handle("tools/call", &context, async {
            let answer = async {
                let catalog = self.catalog().await;
                let (route, listed) = catalog.resolve_tool_listed(&tool_name).ok_or_else(|| {
                    super::routed::unlisted_tool(&self.gateway, &catalog, &tool_name)
                })?;
                if listed {
                    super::observe::names_listed(super::observe::Target::Tool, &tool_name);
                }
                let (mount, upstream, _in_flight) = self.connect(&route.mount).await?;
                params.insert("name".to_owned(), Value::String(route.original.to_string()));
                set_meta(&mut params, &context);
                let limit = mount.request_limit(Some(route.original.as_ref()));
                let crate::upstream::RawExchange {
                    mut result,
                    progress_token,
                    inflight: _in_flight_until_the_task_is_recorded,
                } = upstream
                    .request_raw(
                        "tools/call",
                        params,
                        self.caller(&context),
                        &context.ct,
                        limit,
                    )
                    .await
                    .map_err(|error| {
                        RouteError::of_sessions_request(&self.state(), &mount, error)
                    })?;
                let upstream_id = result
                    .pointer("/task/taskId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                match upstream_id {
                    Some(upstream_id) => {
                        let id = self.state().tasks.add(
                            &mount.config.name,
                            &upstream_id,
                            upstream.id(),
                            task_ttl(&result),
                        );
                        // Status notifications and in-task requests name
                        // the task: they go to this session.
                        let relay = upstream.relay();
                        let (owner, early) = relay.remember_task(
                            &upstream_id,
                            self.caller(&context),
                            id.clone(),
                            progress_token,
                        );
                        for status in early {
                            crate::upstream::handler::send_task_status(relay, &owner, status).await;
                        }
                        if let Some(task) = result.get_mut("task") {
                            rename_task(task, &id);
                        }
                        rename_related_task(&mut result, &id);
                        Ok(result)
                    }
                    // The upstream ran it as a plain call (it may ignore
                    // `task`): relay that result as any other.
                    None => Ok(qualified_tool_result(&mount.config.namespace, result)),
                }
            }
            .await;
            // As for a plain call: a mount out of reach is a tool error the
            // model can read (no task was created; a client must take a
            // plain result from a receiver that made none).
            answer.or_else(|error: RouteError| {
                let result = error.into_tool_answer()?;
                let mut result = serde_json::to_value(result)
                    .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
                // As rmcp's handler shapes a typed answer for a client
                // before 2026-07-28 (the newest the gateway offers).
                if let Some(result) = result.as_object_mut() {
                    result.remove("resultType");
                }
                Ok(result)
            })
        })
        .await
    }

    /// The mount `name` and the upstream session this session's tasks on it
    /// live on; `None` if that upstream session has ended, taking its
    /// tasks with it: a per-session upstream that has closed (none is
    /// opened, a process spawned, a place under `max_upstream_sessions`
    /// taken, only to say a task is unknown), or any upstream of a mount
    /// a reload removed.
    async fn task_upstream(
        &self,
        name: &MountName,
    ) -> Result<Option<(Arc<Mount>, Arc<UpstreamSession>, CallInFlight)>, RouteError> {
        let Some(mount) = self.gateway.mount(name) else {
            return Ok(None);
        };
        if mount.config.isolation == crate::config::Isolation::PerSession {
            // The session's upstream is of a mount a reload has replaced
            // (its tasks go with it), or this one was replaced just now.
            if !self.state().upstream_is_of(&mount) {
                return Ok(None);
            }
            let Some(in_flight) = mount.call_started() else {
                return Ok(None);
            };
            return Ok(self
                .state()
                .open_upstream(name)
                .map(|upstream| (mount, upstream, in_flight)));
        }
        self.connect(name).await.map(Some)
    }

    /// `tasks/get`, `tasks/result` and `tasks/cancel`: routed by the task's
    /// home, answered with the gateway's id in place of the upstream's.
    pub(crate) async fn task_request(
        &self,
        method: &'static str,
        params: Option<Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        self.handle(method, &context, async {
            let id = task_id_param(&params)?;
            let home = self.state().tasks.get(&id).ok_or_else(|| unknown_task(&id))?;
            if let Some(gone) = home.gone {
                return Err(gone);
            }
            // A reload took its mount off the session's endpoint: the
            // session reaches that mount no more.
            if !self.state().sees_mount(&self.gateway, &home.mount) {
                return Err(unknown_task(&id));
            }
            let answer = async {
                let gone = || RouteError::TaskGone {
                    id: id.clone(),
                    mount: home.mount.clone(),
                };
                let (mount, upstream, _in_flight) = self
                    .task_upstream(&home.mount)
                    .await?
                    .ok_or_else(gone)?;
                if !home.lives_on(upstream.id()) {
                    return Err(gone());
                }
                let mut upstream_params = match params.clone() {
                    Some(Value::Object(params)) => params,
                    _ => Map::new(),
                };
                upstream_params.insert("taskId".to_owned(), Value::String(home.upstream_id.clone()));
                set_meta(&mut upstream_params, &context);
                let mut limit = mount.request_limit(None);
                if method == "tasks/result" {
                    // It waits for the task by design: only the ceiling
                    // bounds it.
                    limit.idle = limit.ceiling;
                }
                let mut result = upstream
                    .request_raw(method, upstream_params, self.caller(&context), &context.ct, limit)
                    .await
                    .map_err(|error| RouteError::of_sessions_request(&self.state(), &mount, error))?
                    .result;
                match method {
                    // The task's payload: what the original `tools/call`
                    // would have answered.
                    "tasks/result" => result = qualified_tool_result(&mount.config.namespace, result),
                    _ => rename_task(&mut result, &id),
                }
                rename_related_task(&mut result, &id);
                Ok(result)
            }
            .await;
            answer.map_err(|error| {
                let ended = matches!(error, RouteError::TaskGone { .. });
                let unknown_upstream = matches!(
                    &error,
                    RouteError::UpstreamError { error, .. } if error.code == ErrorCode::INVALID_PARAMS
                );
                let error = error.into_mcp_error();
                // Its upstream session has ended, or (asked by `tasks/get`:
                // a `tasks/cancel` of a finished task is refused -32602
                // too) the upstream no longer knows it (its TTL ran out):
                // every later request for it is told the same.
                if ended || (unknown_upstream && method == "tasks/get") {
                    self.state().tasks.mark_gone(&id, error.clone());
                }
                error
            })
        })
        .await
    }

    /// `tasks/list`: this session's tasks on every mount it has tasks on,
    /// as each upstream lists them now, under the gateway's cursor.
    pub(crate) async fn list_tasks(
        &self,
        params: Option<Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        self.handle("tasks/list", &context, async {
            let mut tasks = Vec::new();
            // Every mount at once: the answer waits for the slowest, not
            // for their sum.
            let state = self.state();
            let by_mount = state
                .tasks
                .by_mount()
                .into_values()
                .filter(|(mount, _)| state.sees_mount(&self.gateway, mount));
            let listings = futures::future::join_all(by_mount.map(|(mount_name, ids)| async {
                let listed = self.list_mount_tasks(&mount_name, &context).await;
                (mount_name, ids, listed)
            }))
            .await;
            for (mount_name, ids, listed) in listings {
                let (listed, upstream) = match listed {
                    Ok(Some(listed)) => listed,
                    Ok(None) => {
                        // Their upstream session has ended (or their mount
                        // is gone), and they with it: as `tasks/get` would
                        // find, they are forgotten.
                        for (home, id) in ids.values() {
                            self.state().tasks.mark_gone(id, gone_task(id, &home.mount));
                        }
                        continue;
                    }
                    Err(error) => {
                        tracing::debug!(mount = %mount_name, %error, "tasks/list failed upstream");
                        continue;
                    }
                };
                // Tasks of an earlier upstream session of this mount (it
                // restarted, or a reload replaced it) are gone too.
                for (home, id) in ids.values() {
                    if !home.lives_on(upstream.id()) {
                        self.state().tasks.mark_gone(id, gone_task(id, &home.mount));
                    }
                }
                for mut task in listed {
                    let Some((_, id)) = task
                        .get("taskId")
                        .and_then(Value::as_str)
                        .and_then(|upstream_id| ids.get(upstream_id))
                        .filter(|(home, _)| home.lives_on(upstream.id()))
                    else {
                        // Another session's task on a shared upstream (or
                        // one with an id this session's ended task had).
                        continue;
                    };
                    let id = id.clone();
                    rename_task(&mut task, &id);
                    tasks.push(task);
                }
            }
            let cursor = params
                .as_ref()
                .and_then(|params| params.get("cursor"))
                .and_then(Value::as_str);
            let (page, next) = catalog::page(&tasks, 0, cursor, catalog::PAGE_SIZE)
                .map_err(|error| ErrorData::invalid_params(error.to_string(), None))?;
            let mut result = json!({ "tasks": page });
            if let Some(next) = next {
                result["nextCursor"] = Value::String(next);
            }
            Ok(result)
        })
        .await
    }

    /// Every task `mount`'s upstream lists for this session's connection,
    /// and that upstream session; `None` if the upstream session this
    /// session's tasks there lived on has ended (see `task_upstream`). All
    /// its pages together take at most the mount's `request_ceiling`;
    /// what was read by then is kept.
    async fn list_mount_tasks(
        &self,
        mount: &MountName,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<(Vec<Value>, Arc<UpstreamSession>)>, RouteError> {
        let Some((mount, upstream, _in_flight)) = self.task_upstream(mount).await? else {
            return Ok(None);
        };
        let limit = mount.request_limit(None);
        let deadline = tokio::time::Instant::now() + limit.ceiling;
        let mut tasks = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 0..MAX_LIST_PAGES {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if page > 0 && left.is_zero() {
                tracing::debug!(mount = %mount.config.name, "tasks/list: more pages past the request ceiling; keeping what was read");
                break;
            }
            let mut params = Map::new();
            if let Some(cursor) = cursor.take() {
                params.insert("cursor".to_owned(), Value::String(cursor));
            }
            let request = upstream.request_raw(
                "tasks/list",
                params,
                self.caller(context),
                &context.ct,
                limit,
            );
            // A later page is cut at the listing's deadline by dropping it
            // (the upstream is told to cancel): the listing's own bound,
            // not the request timing out, which would have the upstream
            // checked for life.
            let answer = if page == 0 {
                request.await
            } else {
                match tokio::time::timeout(left, request).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        tracing::debug!(mount = %mount.config.name, "tasks/list: a page past the request ceiling; keeping what was read");
                        break;
                    }
                }
            };
            let result = answer
                .map_err(|error| RouteError::of_sessions_request(&self.state(), &mount, error))?
                .result;
            if let Some(listed) = result.get("tasks").and_then(Value::as_array) {
                tasks.extend(listed.iter().cloned());
            }
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        Ok(Some((tasks, upstream)))
    }
}

/// The client's `_meta` for the upstream (minus the progress token rmcp
/// replaces with its own).
fn set_meta(params: &mut Map<String, Value>, context: &RequestContext<RoleServer>) {
    match forwarded_meta(&context.meta).and_then(|meta| serde_json::to_value(meta).ok()) {
        Some(meta) => params.insert("_meta".to_owned(), meta),
        None => params.remove("_meta"),
    };
}

/// A tool result as written by the upstream, its resource links given the
/// mount's namespace. Rewritten as JSON, not through rmcp's model: that
/// would drop a block of a kind it cannot read (and leave the links of
/// the whole result unqualified), and write an `f32` it read through an
/// `f64` (0.3 became 0.30000001192092896). One without `content` (which
/// the spec requires) gets an empty one, as a plain call's does.
fn qualified_tool_result(namespace: &Namespace, mut result: Value) -> Value {
    rewrite::qualify_tool_result_json(namespace, &mut result);
    if let Some(fields) = result.as_object_mut() {
        fields
            .entry("content")
            .or_insert_with(|| Value::Array(Vec::new()));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::relay::RELATED_TASK;

    /// A task's result without `content` gets an empty one, as a plain
    /// call's does through rmcp's model; everything else stays as written.
    #[test]
    fn a_task_result_without_content_gets_an_empty_one() {
        let namespace = Namespace::new("ns").unwrap();
        let structured = json!({"structuredContent": {"n": 0.3}, "isError": false});
        assert_eq!(
            qualified_tool_result(&namespace, structured),
            json!({"structuredContent": {"n": 0.3}, "isError": false, "content": []})
        );
        let written = json!({"content": [{"type": "text", "text": "t"}]});
        assert_eq!(qualified_tool_result(&namespace, written.clone()), written);
    }

    #[test]
    fn only_a_tools_call_with_a_task_is_augmented() {
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","task":{"ttl":60000}}}"#;
        let kept = task_augmentation(call, SPEAKS_TASKS).expect("augmented");
        assert_eq!(kept.0["task"].get("ttl"), Some(&json!(60000)));
        for body in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"task":{}}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"t","task":{}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","task":null}}"#,
        ] {
            assert!(task_augmentation(body, SPEAKS_TASKS).is_none(), "{}", String::from_utf8_lossy(body));
        }
        // Not a TaskMetadata: taken, to be refused where it is handled.
        let odd =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","task":"x"}}"#;
        assert!(task_augmentation(odd, SPEAKS_TASKS).is_some());
        // A client of an earlier version: `task` means nothing to it.
        for version in [None, Some(&b"2025-06-18"[..]), Some(b"2025-03-26")] {
            assert!(task_augmentation(call, version).is_none(), "{version:?}");
            assert!(task_augmentation(odd, version).is_none(), "{version:?}");
        }
    }

    const SPEAKS_TASKS: Option<&[u8]> = Some(b"2025-11-25");

    #[test]
    fn a_task_must_be_task_metadata() {
        assert_eq!(task_metadata_problem(&json!({})), None);
        assert_eq!(task_metadata_problem(&json!({"ttl": 60000})), None);
        assert_eq!(task_metadata_problem(&json!({"ttl": null})), None);
        for odd in [
            json!("x"),
            json!([]),
            json!(true),
            json!({"ttl": "abc"}),
            json!({"ttl": -1}),
        ] {
            assert!(task_metadata_problem(&odd).is_some(), "{odd}");
        }
    }

    #[test]
    fn ids_are_per_mount_and_only_the_creating_table_knows_them() {
        let a = TaskTable::default();
        let b = TaskTable::default();
        let one = MountName::new("one").unwrap();
        let two = MountName::new("two").unwrap();
        let first = a.add(&one, "1", 7, None);
        let second = a.add(&two, "1", 8, None);
        assert_ne!(first, second, "the same upstream id on two mounts");
        assert_eq!(a.get(&first).unwrap().upstream_id, "1");
        assert_eq!(a.get(&second).unwrap().mount, two);
        assert!(b.get(&first).is_none(), "another session's table");
        let by_mount: Vec<_> = a.by_mount().into_values().collect();
        assert_eq!(by_mount[0].0, one, "in mount-name order");
        assert_eq!(by_mount[0].1.get("1").map(|(_, id)| id), Some(&first));
        assert_eq!(by_mount[1].1.get("1").map(|(_, id)| id), Some(&second));
    }

    /// A task known to be gone keeps its answer for every later request,
    /// is no longer listed, and keeps its session awake no more.
    #[test]
    fn a_gone_task_keeps_the_answer_that_said_so() {
        let table = TaskTable::default();
        let mount = MountName::new("m").unwrap();
        let first = table.add(&mount, "1", 7, None);
        let second = table.add(&mount, "2", 7, None);
        let now = Instant::now();
        assert!(!table.all_expired(now, |_, _| true), "unlimited, alive");
        let answer = gone_task(&first, &mount);
        table.mark_gone(&first, answer.clone());
        table.mark_gone(&first, unknown_task(&first));
        assert_eq!(
            table.get(&first).unwrap().gone,
            Some(answer),
            "the first answer stays"
        );
        assert_eq!(table.get(&second).unwrap().gone, None);
        let listed: Vec<String> = table
            .by_mount()
            .into_values()
            .flat_map(|(_, tasks)| tasks.into_values().map(|(_, id)| id))
            .collect();
        assert_eq!(listed, vec![second.clone()]);
        table.mark_gone(&second, gone_task(&second, &mount));
        assert!(table.all_expired(now, |_, _| true), "only gone ones left");
        // A new task the upstream gives the same id takes it over, alive.
        table.add(&mount, "1", 8, None);
        assert_eq!(table.get(&first).unwrap().gone, None);
    }

    /// A task belongs to the upstream session that created it: after a
    /// restart the same upstream id may name another session's task.
    #[test]
    fn a_task_lives_on_the_upstream_session_that_created_it() {
        let table = TaskTable::default();
        let mount = MountName::new("m").unwrap();
        let id = table.add(&mount, "1", 7, None);
        let home = table.get(&id).unwrap();
        assert!(home.lives_on(7));
        assert!(!home.lives_on(8), "a restarted upstream's task 1");
        // The session's new task with the same upstream id, on the new
        // upstream session, takes the id over.
        assert_eq!(table.add(&mount, "1", 8, None), id);
        assert!(table.get(&id).unwrap().lives_on(8));
        assert_eq!(lock(&table.0).order.len(), 1);
    }

    #[test]
    fn a_session_remembers_its_newest_tasks() {
        let table = TaskTable::default();
        let mount = MountName::new("m").unwrap();
        let ids: Vec<String> = (0..TASKS_PER_SESSION + 2)
            .map(|n| table.add(&mount, &n.to_string(), 1, None))
            .collect();
        assert!(table.get(&ids[0]).is_none() && table.get(&ids[1]).is_none());
        assert!(table.get(&ids[2]).is_some() && table.get(ids.last().unwrap()).is_some());
        assert_eq!(lock(&table.0).order.len(), TASKS_PER_SESSION);
    }

    /// A session may sleep once every task it created is past its TTL or
    /// its upstream session has ended; a task with none (unlimited) on a
    /// live upstream keeps it awake.
    #[test]
    fn tasks_let_a_session_sleep_once_past_their_ttls() {
        let table = TaskTable::default();
        let mount = MountName::new("m").unwrap();
        let now = Instant::now();
        let lives = |_: &MountName, upstream: u64| upstream == 1;
        let all_expired = |at| table.all_expired(at, lives);
        assert!(all_expired(now), "no task");
        let ttl = |created: &Value| task_ttl(created);
        table.add(&mount, "1", 1, ttl(&json!({"task": {"ttl": 1000}})));
        assert!(!all_expired(now));
        assert!(all_expired(now + Duration::from_secs(2)));
        table.add(&mount, "2", 1, ttl(&json!({"task": {"ttl": null}})));
        assert!(!all_expired(now + Duration::from_secs(3600)), "unlimited");
        // Its upstream session gone (a restart), the task is gone too.
        assert!(table.all_expired(now, |_, _| false));
    }

    #[test]
    fn task_ids_in_answers_are_renamed() {
        let mut created = json!({"task": {"taskId": "u1", "status": "working", "ttl": 5}});
        rename_task(created.get_mut("task").unwrap(), "m/u1");
        assert_eq!(
            created,
            json!({"task": {"taskId": "m/u1", "status": "working", "ttl": 5}})
        );
        let mut result =
            json!({"content": [], "_meta": {RELATED_TASK: {"taskId": "u1"}, "other": 1}});
        rename_related_task(&mut result, "m/u1");
        assert_eq!(result["_meta"][RELATED_TASK]["taskId"], "m/u1");
        assert_eq!(result["_meta"]["other"], 1, "other _meta untouched");
    }

    #[test]
    fn execution_is_added_only_where_declared() {
        // As the catalog makes its pages: with 2026-07-28's `resultType`.
        let tools = rmcp::model::ListToolsResult::with_all_items(
            serde_json::from_value(json!([
                {"name": "a__plain", "inputSchema": {"type": "object"}},
                {"name": "a__task", "inputSchema": {"type": "object"}}
            ]))
            .unwrap(),
        );
        assert!(with_execution(&tools, &HashMap::new()).is_none());
        let execution = HashMap::from([("a__task".to_owned(), json!({"taskSupport": "required"}))]);
        let listed = with_execution(&tools, &execution).expect("a tool declares one");
        assert!(listed["tools"][0].get("execution").is_none());
        assert_eq!(listed["tools"][1]["execution"]["taskSupport"], "required");
        // Sent to clients of 2025-11-25 at most: without it.
        assert!(listed.get("resultType").is_none(), "{listed}");
    }
}
