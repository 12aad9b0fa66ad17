//! An upstream session's end: what `close` does to a stdio child and what
//! it started; and a one-answer SSE server the upstream modules' tests
//! share.

use std::{path::Path, sync::Arc, time::Duration};

use rmcp::model::{ResourceUpdatedNotificationParam, ServerNotification};

use super::*;
use crate::config::{load, ConfigSource};

/// Events nobody listens to: these tests look at processes only.
struct NoEvents;

impl UpstreamEvents for NoEvents {
    fn list_changed(&self, _kind: ListKind) {}
    fn resource_updated(&self, _params: ResourceUpdatedNotificationParam) {}
    fn tell_session(&self, _session: u64, _notification: ServerNotification) {}
}

/// Opens a session to `python3 -c script`, which is handed `marker` as its
/// first argument.
async fn open_python(dir: &Path, script: &str, marker: &Path) -> UpstreamSession {
    let mount = format!(
        "command = \"python3\"\nargs = [\"-c\", {script:?}, {:?}]\n",
        marker.display().to_string()
    );
    open_mount(dir, &mount).await.expect("the fixture starts")
}

/// Opens a session to the mount whose table is `mount` (TOML), loaded as
/// a config file in `dir` would be.
async fn open_mount(dir: &Path, mount: &str) -> Result<UpstreamSession, connect::UpstreamError> {
    let file = dir.join("junction.toml");
    std::fs::write(&file, format!("[mounts.fixture]\n{mount}")).expect("write the config");
    let config = load(&ConfigSource::File(file)).expect("a valid config");
    let mount = &config.mounts[0];
    let handler = UpstreamHandler::new(
        connect::client_config(ClientProfile::FULL.capabilities()),
        Arc::new(NoEvents),
        Arc::new(Relay::default()),
    );
    open(
        mount,
        config.timeouts.for_mount(&mount.timeouts),
        handler,
        None,
    )
    .await
}

/// A stdio server that answers `initialize` and, once its stdin closes,
/// takes a moment to save its state (writes `marker`) before it exits.
const SAVES_ON_EOF: &str = r#"
import json, sys, time
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {}, "serverInfo": {"name": "saves", "version": "0"}}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        sys.stdout.flush()
time.sleep(0.5)
open(sys.argv[1], "w").write("saved")
"#;

/// A session's end racing its mount's retire closes the same upstream
/// twice: the second close waited for nothing and killed the process group
/// while the first was still giving the server its time to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_close_waits_for_the_graceful_stop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("saved");
    let session = open_python(dir.path(), SAVES_ON_EOF, &marker).await;
    let first = session.close();
    let second = async {
        // Once the first close has begun its graceful stop (it has taken
        // the service to stop it).
        while session
            .service
            .lock()
            .is_ok_and(|service| service.is_some())
        {
            tokio::task::yield_now().await;
        }
        session.close().await;
        std::fs::read_to_string(&marker).ok()
    };
    let (_, seen_by_second) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(first, second)
    })
    .await
    .expect("both closes end");
    assert_eq!(
        seen_by_second.as_deref(),
        Some("saved"),
        "the server was killed before it saved"
    );
}

/// A server on a free loopback port answering its first request with the
/// SSE `body` and nothing more; its MCP endpoint's URL.
pub(super) async fn sse_once(body: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let mut buffer = vec![0; 8192];
        let _ = stream.read(&mut buffer).await;
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(reply.as_bytes()).await;
    });
    url
}

/// A mount whose `cwd` does not exist is told so: the spawn's own error
/// ("No such file or directory") named only the command, which exists.
#[tokio::test]
async fn a_missing_working_directory_is_named() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let missing = dir.path().join("no-such-dir");
    let mount = format!(
        "command = \"true\"\ncwd = {:?}\n",
        missing.display().to_string()
    );
    let error = open_mount(dir.path(), &mount)
        .await
        .expect_err("no directory to start in")
        .to_string();
    assert!(error.contains(&missing.display().to_string()), "{error}");
}
