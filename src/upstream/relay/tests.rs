//! Attribution and registry tests: callers built on in-memory peers.

use rmcp::{
    model::{Extensions, ProgressToken, RequestId},
    service::InboundStreamOrigin,
    RoleServer,
};

use super::{inflight::required_elicitation_ids, *};
use crate::upstream::ClientProfile;

/// A server handler that offers nothing: a peer to build callers on.
struct Nothing;
impl rmcp::ServerHandler for Nothing {}

/// A caller from downstream session `session`, and the service its
/// peer sends to (kept alive by the test).
fn caller(session: u64) -> (Caller, rmcp::service::RunningService<RoleServer, Nothing>) {
    let (transport, _other_end) = tokio::io::duplex(64);
    let service = rmcp::service::serve_directly(Nothing, transport, None);
    let caller = Caller {
        session,
        peer: service.peer().clone(),
        request_id: None,
        progress_token: None,
        profile: ClientProfile::default(),
        log_level: LogLevelSetting::new(),
        request_stream: None,
        handoff: None,
    };
    (caller, service)
}

fn token(n: i64) -> ProgressToken {
    ProgressToken(rmcp::model::NumberOrString::Number(n))
}

/// Request `id` of `caller`, sent and answered.
fn answered(relay: &Arc<Relay>, id: i64, caller: Caller) {
    relay
        .register(RequestId::Number(id), token(id), caller)
        .answered();
}

/// A session falling asleep lets go of its tasks (and the peer their
/// owners hold); what the upstream says of them then is refused as
/// about a forgotten task. Another session's stay.
#[tokio::test]
async fn a_sleeping_sessions_tasks_are_let_go() {
    let relay = Arc::new(Relay::default());
    let (sleeper, _sleeper_peer) = caller(1);
    let (other, _other_peer) = caller(2);
    relay.remember_task("u1", sleeper, "m/u1".into(), token(1));
    relay.remember_task("u2", other, "m/u2".into(), token(2));
    relay.forget_tasks_of(1);
    assert!(relay.task_owner("u1").is_none());
    assert!(relay.task_owner("u2").is_some());
    assert!(matches!(
        relay.attribute(&Extensions::new(), Some("u1")),
        Err(Unattributed::ForgottenTask(_))
    ));
}

/// A server→client request waiting for its client keeps the upstream
/// requests it stands for from going idle: its own request, or, when
/// attributed to the session alone (it had two in flight on a stdio
/// upstream), every request of that session here; no other session's.
#[tokio::test]
async fn a_request_waiting_for_its_client_is_not_idle() {
    let relay = Arc::new(Relay::default());
    let (session, _peer) = caller(1);
    let (other, _other_peer) = caller(2);
    let of_request = |id: i64| Caller {
        request_id: Some(RequestId::Number(id)),
        ..session.clone()
    };
    let first = relay.register(RequestId::Number(1), token(1), of_request(10));
    let second = relay.register(RequestId::Number(2), token(2), of_request(20));
    let others = relay.register(RequestId::Number(3), token(3), other);
    let waiting = relay.awaiting_client(&of_request(20));
    assert!(!first.awaiting_client() && second.awaiting_client());
    drop(waiting);
    assert!(!second.awaiting_client());
    let waiting = relay.awaiting_client(&session.session_only());
    assert!(first.awaiting_client() && second.awaiting_client());
    assert!(!others.awaiting_client());
    drop(waiting);
    assert!(!first.awaiting_client() && !second.awaiting_client());
}

/// What an upstream goes on sending for a request its client cancelled
/// (or that timed out) is not another session's, though that session
/// now has the one request in flight: on the cancelled request's own
/// stream it is the first session's, without a stream it is ambiguous.
#[tokio::test]
async fn a_cancelled_requests_messages_do_not_go_to_another_session() {
    let relay = Arc::new(Relay::default());
    let (cancelling, _cancelling_peer) = caller(1);
    let (other, _other_peer) = caller(2);
    drop(relay.register(RequestId::Number(1), token(1), cancelling));
    let _inflight = relay.register(RequestId::Number(2), token(2), other);
    let mut on_its_stream = Extensions::new();
    on_its_stream.insert(InboundStreamOrigin::OutboundRequest(RequestId::Number(1)));
    let attributed = relay.attribute(&on_its_stream, None);
    assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
    let attributed = relay.attribute(&Extensions::new(), None);
    assert!(
        matches!(attributed, Err(Unattributed::Ambiguous(2))),
        "went to session {:?}",
        attributed.ok().map(|caller| caller.session)
    );
}

/// An upstream may ask about a task (an elicitation naming it) as soon
/// as it has answered the call that created it, before the gateway has
/// recorded who owns the task: the request waits for that, rather than
/// being refused as ambiguous or, once the creating call no longer
/// counted, going to the one session with a request in flight.
#[tokio::test]
async fn a_request_about_a_task_just_created_waits_for_its_owner() {
    let relay = Arc::new(Relay::default());
    let (creator, _creator_peer) = caller(1);
    let (other, _other_peer) = caller(2);
    let mut creating = relay.register(RequestId::Number(1), token(1), creator.clone());
    creating.answered();
    let _other = relay.register(RequestId::Number(2), token(2), other);
    let extensions = Extensions::new();
    let attribution = relay.attribute_request(&extensions, Some("u1"));
    tokio::pin!(attribution);
    assert!(futures::poll!(&mut attribution).is_pending());
    relay.remember_task("u1", creator, "m/u1".into(), token(1));
    drop(creating);
    assert_eq!(attribution.await.ok().map(|caller| caller.session), Some(1));
}

/// A request that just ended may write a log line after its answer:
/// with another session's request abandoned and nothing in flight,
/// that line is not the abandoned session's to claim.
#[tokio::test]
async fn an_abandoned_request_does_not_claim_a_line_written_after_another_answer() {
    let relay = Arc::new(Relay::default());
    let (cancelling, _cancelling_peer) = caller(1);
    let (answered_just_now, _answered_peer) = caller(2);
    drop(relay.register(RequestId::Number(1), token(1), cancelling));
    answered(&relay, 2, answered_just_now);
    let attributed = relay.attribute_notification(&Extensions::new(), None).await;
    assert!(
        matches!(attributed, Err(Unattributed::Ambiguous(2))),
        "went to session {:?}",
        attributed.ok().map(|caller| caller.session)
    );
}

/// With nothing else in flight, the abandoned request's session gets
/// what its request still causes (a log line, a sampling request).
#[tokio::test]
async fn an_abandoned_requests_messages_go_to_its_session() {
    let relay = Arc::new(Relay::default());
    let (cancelling, _cancelling_peer) = caller(1);
    drop(relay.register(RequestId::Number(1), token(1), cancelling));
    let attributed = relay.attribute(&Extensions::new(), None);
    assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
    // An answered request leaves nothing behind to claim them.
    let relay = Arc::new(Relay::default());
    let (done, _done_peer) = caller(1);
    answered(&relay, 1, done);
    assert!(matches!(
        relay.attribute(&Extensions::new(), None),
        Err(Unattributed::Nobody)
    ));
}

/// An abandoned request the upstream answered after all (the Python
/// SDK answers every cancelled request) claims nothing read after its
/// answer: for 30 s, another session's server requests and log lines
/// were refused as ambiguous (black-box helper).
#[tokio::test]
async fn an_abandoned_request_answered_after_all_claims_nothing_read_after() {
    let relay = Arc::new(Relay::default());
    let (cancelling, _cancelling_peer) = caller(1);
    let (busy, _busy_peer) = caller(2);
    drop(relay.register(RequestId::Number(1), token(1), cancelling));
    let _inflight = relay.register(RequestId::Number(2), token(2), busy);
    let line = || {
        let mut extensions = Extensions::new();
        extensions.insert(relay.notification_arrived(true));
        extensions
    };
    let before = line();
    relay.answer_read(&RequestId::Number(1));
    let after = line();
    let attributed = relay.attribute_notification(&before, None).await;
    assert!(
        matches!(attributed, Err(Unattributed::Ambiguous(2))),
        "a line read before the answer may be the abandoned request's: {:?}",
        attributed.ok().map(|caller| caller.session)
    );
    let attributed = relay.attribute_notification(&after, None).await;
    assert_eq!(attributed.ok().map(|caller| caller.session), Some(2));
    // A server request likewise, by where it was read; one the
    // transport did not count may be the abandoned call's.
    let request_read = |read: RequestRead| {
        let mut extensions = Extensions::new();
        extensions.insert(read);
        extensions
    };
    let (read_before, read_after) = (RequestRead(0), relay.request_arrived());
    let attributed = relay
        .attribute_request(&request_read(read_after), None)
        .await;
    assert_eq!(attributed.ok().map(|caller| caller.session), Some(2));
    let mut on_get_stream = request_read(relay.request_arrived());
    on_get_stream.insert(InboundStreamOrigin::Unassociated);
    for (extensions, when) in [
        (request_read(read_before), "read before the answer"),
        (Extensions::new(), "not counted"),
        (
            on_get_stream,
            "on the GET stream, unordered with the answer",
        ),
    ] {
        let attributed = relay.attribute_request(&extensions, None).await;
        assert!(
            matches!(attributed, Err(Unattributed::Ambiguous(2))),
            "{when}: went to session {:?}",
            attributed.ok().map(|caller| caller.session)
        );
    }
}

#[tokio::test]
async fn a_log_message_waits_for_a_request_being_sent_before_one_just_ended_claims_it() {
    let relay = Arc::new(Relay::default());
    let (quiet, _quiet_peer) = caller(1);
    let (chatty, _chatty_peer) = caller(2);
    answered(&relay, 1, quiet);
    // chatty's request is on its way: the upstream logs for it before
    // its id is registered.
    let sending = relay.sending();
    let extensions = Extensions::new();
    let attribution = relay.attribute_notification(&extensions, None);
    tokio::pin!(attribution);
    assert!(
        futures::poll!(&mut attribution).is_pending(),
        "not given to the session whose request just ended"
    );
    let _inflight = relay.register(RequestId::Number(2), token(2), chatty);
    drop(sending);
    assert_eq!(attribution.await.ok().map(|caller| caller.session), Some(2));
}

/// On a per_session upstream, a log line read while its owner's request
/// is being sent (the server wrote it before rmcp told us the id) is
/// that request's, for its stream, not the owner's session's: the
/// owner took it at once, and a call lost its first log line to the
/// `GET` stream now and then (a flaky relay test).
#[tokio::test]
async fn a_line_read_while_the_owners_request_is_sent_is_that_requests() {
    let (owner, _owner_peer) = caller(1);
    let relay = Arc::new(Relay::owned_by(owner.clone()));
    let sending = relay.sending();
    let mut extensions = Extensions::new();
    extensions.insert(relay.notification_arrived(true));
    let attribution = relay.attribute_notification(&extensions, None);
    tokio::pin!(attribution);
    assert!(
        futures::poll!(&mut attribution).is_pending(),
        "not given to the owner's session while its request is sent"
    );
    let request = Caller {
        request_id: Some(RequestId::Number(7)),
        ..owner
    };
    let _inflight = relay.register_sent(sending, RequestId::Number(3), token(3), request);
    let attributed = attribution.await.ok().and_then(|caller| caller.request_id);
    assert_eq!(attributed, Some(RequestId::Number(7)));
    // Nothing being sent: the owner's session takes a line no request
    // claims, at once.
    let (owner, _owner_peer) = caller(2);
    let idle = Relay::owned_by(owner);
    let no_origin = Extensions::new();
    let unclaimed = idle.attribute_notification(&no_origin, None);
    tokio::pin!(unclaimed);
    let attributed = futures::poll!(&mut unclaimed);
    assert!(
        matches!(&attributed, std::task::Poll::Ready(Ok(caller)) if caller.session == 2),
        "{:?}",
        attributed.map(|caller| caller.map(|caller| caller.session))
    );
}

/// A message about a task whose owner was let go (the table is
/// bounded) reaches no session, rather than the one session that
/// happens to have a request in flight.
#[tokio::test]
async fn a_message_about_a_forgotten_task_goes_to_nobody() {
    let relay = Arc::new(Relay::default());
    let (first, _first_peer) = caller(1);
    let (other, _other_peer) = caller(2);
    relay.remember_task("task-of-1", first, "t1".into(), token(0));
    for n in 0..TASKS_MAX {
        relay.remember_task(
            &format!("task-{n}"),
            other.clone(),
            format!("o{n}"),
            token(0),
        );
    }
    assert!(
        relay.task_owner("task-of-1").is_none(),
        "let go, to stay bounded"
    );
    let _inflight = relay.register(RequestId::Number(7), token(7), other);
    let extensions = Extensions::new();
    let attributed = relay.attribute(&extensions, Some("task-of-1"));
    assert!(
        matches!(attributed, Err(Unattributed::ForgottenTask(_))),
        "went to session {:?}",
        attributed.ok().map(|caller| caller.session)
    );
    // A task not known yet (its creating request not answered) still
    // goes by the other rules.
    let attributed = relay.attribute(&extensions, Some("not-yet-known"));
    assert_eq!(attributed.ok().map(|caller| caller.session), Some(2));
}

/// A client's answer names a task as the client knows it; the
/// upstream gets its own id back. Other ids and other keys stay, and
/// so does another session's task (an id guessed: upstream ids are
/// often sequential), which never reaches the upstream as that task.
#[tokio::test]
async fn a_client_named_task_goes_back_under_the_upstreams_id() {
    let relay = Relay::default();
    let (owner, _peer) = caller(1);
    relay.remember_task("u-7", owner, "tasks/u-7".into(), token(0));
    let named = |id: &str| {
        serde_json::json!({ RELATED_TASK: { "taskId": id }, "x-other": 1 })
            .as_object()
            .cloned()
            .expect("an object")
    };
    let mut meta = named("tasks/u-7");
    relay.name_task_as_upstream(1, &mut meta);
    assert_eq!(meta, named("u-7"));
    let mut unknown = named("someone-else");
    relay.name_task_as_upstream(1, &mut unknown);
    assert_eq!(unknown, named("someone-else"));
    let mut not_its_own = named("tasks/u-7");
    relay.name_task_as_upstream(2, &mut not_its_own);
    assert_eq!(not_its_own, named("tasks/u-7"));
}

/// A log line arriving on an HTTP upstream's `GET` stream after
/// another session's answer (the streams are unordered) is not the
/// one in-flight request's: it is ambiguous. On stdio (no stream) it
/// is, and so is a request the upstream sends.
#[tokio::test]
async fn a_late_log_line_on_the_get_stream_is_not_the_one_in_flight_requests() {
    let relay = Arc::new(Relay::default());
    let (in_flight, _in_flight_peer) = caller(1);
    let (answered_just_now, _answered_peer) = caller(2);
    let _inflight = relay.register(RequestId::Number(1), token(1), in_flight);
    answered(&relay, 2, answered_just_now);
    let mut on_get_stream = Extensions::new();
    on_get_stream.insert(InboundStreamOrigin::Unassociated);
    let attributed = relay.attribute_notification(&on_get_stream, None).await;
    assert!(
        matches!(attributed, Err(Unattributed::Ambiguous(2))),
        "went to session {:?}",
        attributed.ok().map(|caller| caller.session)
    );
    for attributed in [
        relay.attribute_notification(&Extensions::new(), None).await,
        relay.attribute_request(&on_get_stream, None).await,
    ] {
        assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
    }
}

/// A message on the answer stream of a request that has ended (its
/// answer went ahead) is that request's session's, or nobody's once
/// forgotten: never the one request in flight's, of another session.
#[tokio::test]
async fn a_message_on_an_ended_requests_stream_is_not_another_sessions() {
    let relay = Arc::new(Relay::default());
    let (ended, _ended_peer) = caller(1);
    let (in_flight, _in_flight_peer) = caller(2);
    answered(&relay, 1, ended);
    let _inflight = relay.register(RequestId::Number(2), token(2), in_flight);
    let on_stream_of = |id: i64| {
        let mut extensions = Extensions::new();
        extensions.insert(InboundStreamOrigin::OutboundRequest(RequestId::Number(id)));
        extensions
    };
    let attributed = relay.attribute_notification(&on_stream_of(1), None).await;
    assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
    let attributed = relay.attribute_request(&on_stream_of(99), None).await;
    assert!(
        matches!(attributed, Err(Unattributed::RequestEnded)),
        "went to session {:?}",
        attributed.ok().map(|caller| caller.session)
    );
    // A per_session upstream's: its owner's.
    let (owner, _owner_peer) = caller(3);
    let owned = Arc::new(Relay::owned_by(owner));
    let attributed = owned.attribute_notification(&on_stream_of(99), None).await;
    assert_eq!(attributed.ok().map(|caller| caller.session), Some(3));
}

/// A line read just after one session's request ended, but handled
/// only after that request's linger (a burst of large lines, a client
/// slow to take them), is that session's, not the request of another
/// session sent meanwhile and alone in flight (black-box helper: 400 of
/// 400 lines went to the other session).
#[tokio::test]
async fn a_line_handled_late_is_not_a_request_sent_after_it_was_read() {
    let relay = Arc::new(Relay::default());
    let (ended, _ended_peer) = caller(1);
    let (sent_later, _later_peer) = caller(2);
    answered(&relay, 1, ended);
    let mut read_then = Extensions::new();
    read_then.insert(relay.notification_arrived(true));
    tokio::time::sleep(LINGER + Duration::from_millis(100)).await;
    let _inflight = relay.register(RequestId::Number(2), token(2), sent_later);
    let attributed = relay.attribute_notification(&read_then, None).await;
    assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
}

/// A line on the `GET` stream read after the one request in flight
/// was answered, while another session's request ended just before,
/// may be either's: the answered request's session does not take it
/// for being the only one left in flight.
#[tokio::test]
async fn a_line_after_the_last_answer_is_not_that_sessions_while_another_just_ended() {
    let relay = Arc::new(Relay::default());
    let (answered_now, _answered_peer) = caller(1);
    let (ended_before, _ended_peer) = caller(2);
    answered(&relay, 2, ended_before);
    let _inflight = relay.register(RequestId::Number(1), token(1), answered_now);
    relay.answer_read(&RequestId::Number(1));
    let mut on_get_stream = Extensions::new();
    on_get_stream.insert(InboundStreamOrigin::Unassociated);
    on_get_stream.insert(relay.notification_arrived(true));
    let attributed = relay.attribute_notification(&on_get_stream, None).await;
    assert!(
        matches!(attributed, Err(Unattributed::Ambiguous(2))),
        "went to session {:?}",
        attributed.ok().map(|caller| caller.session)
    );
}

/// An answer read before its request is registered (a fast upstream
/// answers while rmcp is still handing the id back) still marks it:
/// a line read after it is not the request's to carry.
#[tokio::test]
async fn an_answer_read_before_its_request_is_registered_still_counts() {
    let relay = Arc::new(Relay::default());
    let (mut only, _peer) = caller(1);
    only.request_id = Some(RequestId::Number(77));
    let sending = relay.sending();
    relay.answer_read(&RequestId::Number(1));
    let _inflight = relay.register(RequestId::Number(1), token(1), only);
    drop(sending);
    let mut after_answer = Extensions::new();
    after_answer.insert(relay.notification_arrived(true));
    let attributed = relay
        .attribute_notification(&after_answer, None)
        .await
        .expect("the session's");
    assert_eq!(attributed.session, 1);
    assert_eq!(
        attributed.request_id, None,
        "a line read after the answer went to the answered request"
    );
}

#[tokio::test]
async fn a_late_log_message_goes_to_the_one_session_whose_request_just_ended() {
    let relay = Arc::new(Relay::default());
    let (only, _peer) = caller(1);
    answered(&relay, 1, only);
    let extensions = Extensions::new();
    let attributed = relay.attribute_notification(&extensions, None).await;
    assert_eq!(attributed.ok().map(|caller| caller.session), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_notification_waits_for_the_ones_that_arrived_before_it() {
    let relay = Relay::default();
    let first = relay.notification_arrived(true);
    let second = relay.notification_arrived(true);
    let second_turn = relay.wait_turn(second);
    tokio::pin!(second_turn);
    assert!(futures::poll!(&mut second_turn).is_pending());
    relay.wait_turn(first).await;
    relay.notification_relayed(Some(first));
    // Woken by the relay, not by its time running out (paused time
    // would run out the shorter timer here first).
    tokio::time::timeout(TURN_LIMIT / 2, second_turn)
        .await
        .expect("its turn once the first is relayed");
}

#[test]
fn a_request_id_is_first_sent_once() {
    let relay = Relay::default();
    let (number, text) = (RequestId::Number(1), RequestId::String("1".into()));
    assert!(relay.first_sent(&number));
    assert!(relay.first_sent(&text), "a string id is not the number");
    assert!(!relay.first_sent(&number));
    assert!(!relay.first_sent(&text));
}

/// A notification that takes no turn (a `list_changed`, a cancel),
/// handled at once, lets no later progress overtake an earlier one.
#[tokio::test(start_paused = true)]
async fn one_taking_no_turn_moves_no_turn_on() {
    let relay = Relay::default();
    let first = relay.notification_arrived(true);
    let unordered = relay.notification_arrived(false);
    let second = relay.notification_arrived(true);
    relay.wait_turn(unordered).await;
    relay.notification_relayed(Some(unordered));
    let second_turn = relay.wait_turn(second);
    tokio::pin!(second_turn);
    assert!(
        futures::poll!(&mut second_turn).is_pending(),
        "the first is not relayed yet"
    );
    relay.notification_relayed(Some(first));
    tokio::time::timeout(TURN_LIMIT / 2, second_turn)
        .await
        .expect("its turn once the first is relayed");
    relay.notification_relayed(Some(second));
    // And nothing is left pending for an answer's drain.
    tokio::time::timeout(Duration::from_millis(1), relay.drain())
        .await
        .expect("none pending");
    // One never counted marks nothing.
    relay.notification_relayed(None);
}

#[tokio::test(start_paused = true)]
async fn a_notification_whose_predecessor_never_goes_waits_only_so_long() {
    let relay = Relay::default();
    let _lost = relay.notification_arrived(true);
    let next = relay.notification_arrived(true);
    let started = tokio::time::Instant::now();
    relay.wait_turn(next).await;
    assert!(started.elapsed() >= TURN_LIMIT);
    relay.notification_relayed(Some(next));
    let after = relay.notification_arrived(true);
    let started = tokio::time::Instant::now();
    relay.wait_turn(after).await;
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "the lost one holds no later one"
    );
}

#[test]
fn a_url_elicitation_required_error_names_its_elicitations() {
    let data = serde_json::json!({
        "elicitations": [
            { "mode": "url", "elicitationId": "e1", "url": "https://a.example", "message": "m" },
            { "mode": "url", "url": "https://no-id.example" },
            { "mode": "url", "elicitationId": "e2", "url": "https://b.example", "message": "m" }
        ]
    });
    assert_eq!(required_elicitation_ids(Some(&data)), ["e1", "e2"]);
    assert!(required_elicitation_ids(Some(&serde_json::json!({ "uri": "x" }))).is_empty());
    assert!(required_elicitation_ids(Some(&serde_json::json!("text"))).is_empty());
    assert!(required_elicitation_ids(None).is_empty());
}
