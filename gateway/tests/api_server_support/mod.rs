//! The API server tests' side: an in-process server over the real agent
//! factory and store with the loopback fake provider behind it, a plain
//! HTTP client (ureq, nothing shared with the server), SSE parsing, and the
//! published OpenAI response schemas (`tests/fixtures/openai-schemas/`,
//! copied from `openai` 2.24.0's types).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_gateway::api_server::{ApiServer, ApiServerConfig};
use hermes_gateway::app::RuntimeAgentFactory;
use hermes_runtime::config::{Environment, Overrides, Settings, load};
use hermes_runtime::store::Store;
use hermes_tests::FakeProvider;
use serde_json::Value;

pub const KEY: &str = "sk-hermes-api-test-0123456789";
pub const MODEL: &str = "hermes-agent";

const COMPLETION_SCHEMA: &str =
    include_str!("../../../tests/fixtures/openai-schemas/chat_completion.schema.json");
const CHUNK_SCHEMA: &str =
    include_str!("../../../tests/fixtures/openai-schemas/chat_completion_chunk.schema.json");

fn assert_valid(schema: &str, value: &Value, what: &str) {
    let schema: Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{what}: {errors:#?}\n{value:#}");
}

/// Panics unless `body` is a valid `chat.completion`.
pub fn assert_completion(body: &Value) {
    assert_valid(COMPLETION_SCHEMA, body, "chat.completion");
    assert_eq!(body["object"], "chat.completion");
}

/// Panics unless `chunk` is a valid `chat.completion.chunk`.
pub fn assert_chunk(chunk: &Value) {
    assert_valid(CHUNK_SCHEMA, chunk, "chat.completion.chunk");
    assert_eq!(chunk["object"], "chat.completion.chunk");
}

/// Panics unless `body` is OpenAI's error shape with `status`'s meaning.
pub fn assert_error(answer: &Answer, status: u16, code: Option<&str>) -> String {
    assert_eq!(answer.status, status, "{}", answer.body);
    let v: Value = serde_json::from_str(&answer.body).unwrap();
    let e = &v["error"];
    assert!(e["message"].is_string(), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    if let Some(code) = code {
        assert_eq!(e["code"], code, "{v}");
    }
    assert!(
        !answer.body.contains(KEY),
        "the key leaked: {}",
        answer.body
    );
    e["message"].as_str().unwrap().to_owned()
}

/// Settings of a gateway whose provider is `provider`.
pub fn settings(home: &Path, base_url: &str) -> Settings {
    let pairs: Vec<(String, String)> = vec![
        ("HERMES_HOME".into(), home.display().to_string()),
        ("HERMES_BASE_URL".into(), base_url.to_owned()),
        ("HERMES_API_KEY".into(), "sk-provider".into()),
        ("HERMES_MODEL".into(), "fake-model".into()),
        ("HERMES_TOOLSETS".into(), "todo".into()),
    ];
    let overrides = Overrides {
        workdir: Some(home.to_path_buf()),
        ..Overrides::default()
    };
    load(&overrides, &Environment::from_pairs(pairs)).unwrap()
}

/// An API server in this process on a free loopback port.
pub struct Running {
    pub rt: tokio::runtime::Runtime,
    pub server: Option<ApiServer>,
    pub base: String,
    pub store: Arc<Mutex<Store>>,
    pub home: tempfile::TempDir,
}

impl Running {
    pub fn start(provider: &FakeProvider, tune: impl FnOnce(&mut ApiServerConfig)) -> Self {
        let home = tempfile::tempdir().unwrap();
        let settings = settings(home.path(), &provider.base_url());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let store = Arc::new(Mutex::new(Store::open(&settings.state_db()).unwrap()));
        let factory = Arc::new(RuntimeAgentFactory::new(&settings, None).unwrap());
        let mut config = ApiServerConfig::new(KEY);
        config.listen = "127.0.0.1:0".parse().unwrap();
        tune(&mut config);
        let server = rt
            .block_on(ApiServer::bind(config, factory, Arc::clone(&store)))
            .unwrap();
        let base = format!("http://{}", server.local_addr());
        Running {
            rt,
            server: Some(server),
            base,
            store,
            home,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            self.rt.block_on(server.stop());
        }
    }
}

/// One answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `method url` with `key` as the bearer, an optional JSON body and extra headers.
pub fn call(
    method: &str,
    url: &str,
    key: Option<&str>,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> Answer {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .new_agent();
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    if let Some(key) = key {
        req = req.header("authorization", format!("Bearer {key}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = match body {
        Some(b) => agent
            .run(
                req.header("content-type", "application/json")
                    .body(b.to_vec())
                    .unwrap(),
            )
            .unwrap(),
        None => agent.run(req.body(()).unwrap()).unwrap(),
    };
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(64 * 1024 * 1024)
        .read_to_string()
        .unwrap();
    Answer {
        status,
        headers,
        body,
    }
}

/// `POST /v1/chat/completions` with `body`.
pub fn complete(run: &Running, body: &Value, headers: &[(&str, &str)]) -> Answer {
    call(
        "POST",
        &run.url("/v1/chat/completions"),
        Some(KEY),
        Some(body.to_string().as_bytes()),
        headers,
    )
}

/// The `data:` payloads of an event stream, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .flat_map(|event| {
            event
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect()
}

pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}
