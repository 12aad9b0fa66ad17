//! Upstream tasks (2025-11-25) and the sessions that created them: a
//! message about a task goes to its creator alone, under the id its client
//! knows it by.

use std::time::Instant;

use rmcp::model::{CustomNotification, ProgressToken};

use super::{lock, Caller, Relay, LINGER, RECENT_MAX};

/// The `_meta` key that ties a message to a task (2025-11-25).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The task id in a related-task `_meta` object, if any.
pub fn related_task(meta: &serde_json::Map<String, serde_json::Value>) -> Option<&str> {
    meta.get(RELATED_TASK)?.get("taskId")?.as_str()
}

/// Makes a related-task `_meta` object, if it has one, name task `id`.
pub fn set_related_task(meta: &mut serde_json::Map<String, serde_json::Value>, id: &str) {
    if let Some(related) = meta
        .get_mut(RELATED_TASK)
        .and_then(serde_json::Value::as_object_mut)
    {
        related.insert("taskId".to_owned(), id.into());
    }
}

/// The session that created an upstream task, and the id it knows the
/// task by.
#[derive(Clone)]
pub struct TaskOwner {
    pub caller: Caller,
    pub task_id: String,
    /// The upstream progress token of the request that created the task
    /// and the caller (with the client's own token) its progress goes to:
    /// a task-augmented request's token stays valid until the task ends.
    pub(super) progress: Option<(ProgressToken, Caller)>,
}

/// Bound on the tasks remembered per upstream session (oldest go first).
pub(super) const TASKS_MAX: usize = 1024;
/// Bound on the ids of tasks whose owner was let go (see
/// `Relay::forgotten_tasks`); only the ids are kept.
pub(super) const FORGOTTEN_TASKS_MAX: usize = 16 * 1024;
impl Relay {
    /// Remembers that `caller`'s session created the upstream task
    /// `upstream_id`, which it knows as `task_id`. Returns the task's
    /// status notifications that arrived before this, oldest first.
    /// `upstream_token` is the progress token the creating request was
    /// sent with upstream; its progress keeps reaching `caller` (with the
    /// client's token) until the task ends.
    pub fn remember_task(
        &self,
        upstream_id: &str,
        caller: Caller,
        task_id: String,
        upstream_token: ProgressToken,
    ) -> (TaskOwner, Vec<CustomNotification>) {
        let mut tasks = lock(&self.tasks);
        let progress = caller.progress_token.is_some().then(|| {
            (
                upstream_token,
                Caller {
                    request_stream: None,
                    handoff: None,
                    ..caller.clone()
                },
            )
        });
        let owner = TaskOwner {
            caller: caller.session_only(),
            task_id,
            progress,
        };
        let let_go = tasks.insert(upstream_id.to_owned(), owner.clone());
        if !let_go.is_empty() {
            let mut forgotten = lock(&self.forgotten_tasks);
            for id in let_go {
                forgotten.insert(id, ());
            }
        }
        // Taken under the tasks lock: a status arriving from now on finds
        // the owner, so none is parked after this.
        let mut early = lock(&self.early_statuses);
        let mut statuses = Vec::new();
        early.retain(|(_, id, notification)| {
            if id == upstream_id {
                statuses.push(notification.clone());
                false
            } else {
                true
            }
        });
        (owner, statuses)
    }

    /// The owner of the task a status notification is about, or `None`
    /// after parking the notification for a moment (see `early_statuses`).
    pub fn task_status_owner(
        &self,
        upstream_id: &str,
        notification: &CustomNotification,
    ) -> Option<TaskOwner> {
        let tasks = lock(&self.tasks);
        if let Some(owner) = tasks.get(upstream_id) {
            return Some(owner.clone());
        }
        let mut early = lock(&self.early_statuses);
        let now = Instant::now();
        early.retain(|(arrived, _, _)| now.duration_since(*arrived) <= LINGER);
        if early.len() >= RECENT_MAX {
            early.pop_front();
        }
        early.push_back((now, upstream_id.to_owned(), notification.clone()));
        None
    }

    /// Makes a related-task `_meta` object in session `session`'s answer
    /// that names one of that session's tasks by the id its client knows
    /// it by name it by the upstream's own id. Another session's task is
    /// left as named: an id guessed or learnt never reaches the upstream
    /// as that task's.
    pub fn name_task_as_upstream(
        &self,
        session: u64,
        meta: &mut serde_json::Map<String, serde_json::Value>,
    ) {
        let Some(client_id) = related_task(meta) else {
            return;
        };
        let upstream_id = lock(&self.tasks)
            .iter()
            .find(|(_, owner)| owner.task_id == client_id && owner.caller.session == session)
            .map(|(upstream_id, _)| upstream_id.clone());
        if let Some(upstream_id) = upstream_id {
            set_related_task(meta, &upstream_id);
        }
    }

    /// Lets go of every task downstream session `session` created here:
    /// it sleeps, its tasks past their TTLs, and its peer (which their
    /// owners hold, with rmcp's session machinery behind it) must go with
    /// it. What the upstream still says about them is refused as about a
    /// forgotten task, never given to another session.
    pub fn forget_tasks_of(&self, session: u64) {
        let mut tasks = lock(&self.tasks);
        let ids: Vec<String> = tasks
            .iter()
            .filter(|(_, owner)| owner.caller.session == session)
            .map(|(id, _)| id.clone())
            .collect();
        let mut forgotten = lock(&self.forgotten_tasks);
        for id in ids {
            tasks.remove(&id);
            forgotten.insert(id, ());
        }
    }

    /// How many tasks' owners are remembered here (`/status.json`).
    pub fn tasks_remembered(&self) -> usize {
        lock(&self.tasks).len()
    }

    pub fn task_owner(&self, upstream_id: &str) -> Option<TaskOwner> {
        lock(&self.tasks).get(upstream_id).cloned()
    }

    /// The task ended: its creating request's progress token means nothing
    /// any more.
    pub fn task_ended(&self, upstream_id: &str) {
        if let Some(owner) = lock(&self.tasks).get_mut(upstream_id) {
            owner.progress = None;
        }
    }
}
