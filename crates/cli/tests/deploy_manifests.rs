//! The Kubernetes manifests in deploy/ (SPEC §12): every one validates against the Kubernetes
//! schemas (kubernetes-validate, pinned in scripts/install-test-deps.sh, strict mode, against the
//! oldest and newest Kubernetes versions we name), and together they state what docs/deploy.md
//! promises: three replicas of `serve --http`, /livez and /readyz probes, a grace period that
//! covers the drain window, the session key from the Secret, the config from the ConfigMap (a
//! config `check` accepts), a locked-down container, a Service and a PodDisruptionBudget that
//! select the Deployment's pods, and a kustomization that lists the required files.
//!
//! The YAML is read by the test venv's Python (PyYAML, brought by kubernetes-validate) through
//! tests/py/yaml_to_json.py, which only converts; every assertion is here. Nothing is started
//! but short-lived commands (the validator, the converter, `mcp-supervisor serve --help` and
//! `check`), each awaited to its end.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The Kubernetes versions the manifests must validate against: the oldest we support and the
/// newest the pinned kubernetes-validate knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30", "1.37"];

/// What the proxy drains for when --drain-ms is not given (SPEC §12).
const DEFAULT_DRAIN_MS: u64 = 10_000;

/// The manifests and the one kind each holds. hpa.yaml is optional: validated, not required.
const MANIFESTS: [(&str, &str); 6] = [
    ("configmap.yaml", "ConfigMap"),
    ("secret.yaml", "Secret"),
    ("deployment.yaml", "Deployment"),
    ("service.yaml", "Service"),
    ("poddisruptionbudget.yaml", "PodDisruptionBudget"),
    ("hpa.yaml", "HorizontalPodAutoscaler"),
];
const OPTIONAL: [&str; 1] = ["hpa.yaml"];

fn deploy_dir() -> PathBuf {
    mcp_supervisor_testkit::workspace_root().join("deploy")
}

fn python() -> PathBuf {
    mcp_supervisor_testkit::python("import kubernetes_validate, yaml")
}

/// Every YAML file in deploy/, sorted.
fn yaml_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .expect("deploy/ exists")
        .map(|entry| entry.expect("a readable entry of deploy/").path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    files
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every document of every YAML file in deploy/, by file name.
fn documents() -> serde_json::Map<String, Value> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/yaml_to_json.py");
    let out = run(Command::new(python()).arg(script).args(yaml_files()));
    assert!(
        out.status.success(),
        "yaml_to_json.py failed: {}",
        text(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout) {
        Ok(Value::Object(map)) => map,
        other => panic!("yaml_to_json.py printed no JSON object: {other:?}"),
    }
}

/// The one document of `file`, checked to be of `kind`.
fn only<'a>(docs: &'a serde_json::Map<String, Value>, file: &str, kind: &str) -> &'a Value {
    let list = docs[file]
        .as_array()
        .unwrap_or_else(|| panic!("{file}: no documents"));
    assert_eq!(list.len(), 1, "{file} holds one document");
    assert_eq!(list[0]["kind"], kind, "{file} holds a {kind}");
    &list[0]
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer}"))
}

fn u64_at(value: &Value, pointer: &str) -> u64 {
    value
        .pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no integer at {pointer}"))
}

/// `labels` (a `matchLabels` or a Service selector) selects pods labelled `pod_labels`: every
/// one of its labels is on the pod, and it is not empty.
fn selects(labels: &Value, pod_labels: &Value) -> bool {
    labels
        .as_object()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| pod_labels.get(k) == Some(v)))
}

#[test]
fn every_manifest_validates_against_the_kubernetes_schemas() {
    let names: BTreeSet<String> = yaml_files().iter().map(|p| file_name(p)).collect();
    let expected: BTreeSet<String> = MANIFESTS
        .iter()
        .map(|(f, _)| f.to_string())
        .chain(["kustomization.yaml".to_string()])
        .collect();
    assert_eq!(
        names, expected,
        "deploy/ holds exactly the manifests this test knows (add a new one to MANIFESTS)"
    );

    let files: Vec<PathBuf> = MANIFESTS
        .iter()
        .map(|(f, _)| deploy_dir().join(f))
        .collect();
    let mut cmd = Command::new(python());
    cmd.args(["-m", "kubernetes_validate", "--strict"]);
    for version in KUBERNETES_VERSIONS {
        cmd.args(["--kubernetes-version", version]);
    }
    let out = run(cmd.args(&files));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "kubernetes-validate refused a manifest:\n{stdout}{}",
        text(&out.stderr)
    );
    // A kind or apiVersion it has no schema for is only a warning with exit code 0: require a
    // "passed" line for every file and version, and no other line.
    for line in stdout.lines() {
        assert!(line.starts_with("INFO "), "not a pass: {line}\n{stdout}");
    }
    for (file, kind) in MANIFESTS {
        for version in KUBERNETES_VERSIONS {
            let path = deploy_dir().join(file);
            let want = format!(
                "INFO {} passed for resource {}/mcp-supervisor against version {version}",
                path.display(),
                kind.to_lowercase()
            );
            assert!(
                stdout.lines().any(|l| l == want),
                "missing `{want}` in:\n{stdout}"
            );
        }
    }
}

#[test]
fn the_manifests_state_what_the_deployment_guide_promises() {
    let docs = documents();
    let deployment = only(&docs, "deployment.yaml", "Deployment");
    let service = only(&docs, "service.yaml", "Service");
    let configmap = only(&docs, "configmap.yaml", "ConfigMap");
    let secret = only(&docs, "secret.yaml", "Secret");
    let pdb = only(&docs, "poddisruptionbudget.yaml", "PodDisruptionBudget");
    let hpa = only(&docs, "hpa.yaml", "HorizontalPodAutoscaler");
    let name = str_at(deployment, "/metadata/name");

    // Replicas, and the Deployment's selector selects its own pods.
    let replicas = u64_at(deployment, "/spec/replicas");
    assert_eq!(replicas, 3, "three replicas");
    let pod = &deployment["spec"]["template"];
    let pod_labels = &pod["metadata"]["labels"];
    assert!(
        selects(&deployment["spec"]["selector"]["matchLabels"], pod_labels),
        "the Deployment's selector matches its pod template"
    );

    let containers = pod["spec"]["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    let container = &containers[0];

    // The command line: serve the mounted config over HTTP on every interface.
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("every arg is a string"))
        .collect();
    let flag = |name: &str| -> Vec<&str> {
        args.windows(2)
            .filter(|w| w[0] == name)
            .map(|w| w[1])
            .collect()
    };
    assert_eq!(args.first(), Some(&"serve"), "runs serve: {args:?}");
    assert_eq!(flag("--config"), ["/etc/mcp-supervisor/servers.json"]);
    assert_eq!(flag("--http"), ["0.0.0.0:8080"]);
    assert!(
        flag("--allow-host").contains(&str_at(service, "/metadata/name")),
        "the Service's name is an allowed Host: {args:?}"
    );

    // Both probes, on the named port that is 8080.
    let ports = container["ports"].as_array().expect("ports");
    let http_port = ports
        .iter()
        .find(|p| p["name"] == "http")
        .expect("a port named http");
    assert_eq!(http_port["containerPort"], 8080);
    for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe} asks {path}");
        assert!(
            get["port"] == "http" || get["port"] == 8080,
            "{probe} asks port 8080: {get}"
        );
    }

    // The grace period covers the drain window and 10 s for the servers to stop.
    let drain_ms = match flag("--drain-ms").as_slice() {
        [] => DEFAULT_DRAIN_MS,
        [ms] => ms.parse().expect("--drain-ms is a number"),
        more => panic!("--drain-ms given {} times", more.len()),
    };
    let grace = u64_at(pod, "/spec/terminationGracePeriodSeconds");
    assert!(
        grace >= drain_ms.div_ceil(1000) + 10,
        "terminationGracePeriodSeconds {grace} < drain {drain_ms} ms + 10 s"
    );

    // The session key (and the token, and the optional previous key) from the Secret.
    let secret_name = str_at(secret, "/metadata/name");
    let secret_keys: BTreeSet<&str> = ["stringData", "data"]
        .iter()
        .filter_map(|field| secret[*field].as_object())
        .flat_map(|m| m.keys().map(String::as_str))
        .collect();
    let env = container["env"].as_array().expect("env");
    let from_secret = |var: &str| -> &Value {
        let entry = env
            .iter()
            .find(|e| e["name"] == var)
            .unwrap_or_else(|| panic!("env {var} is set"));
        let reference = &entry["valueFrom"]["secretKeyRef"];
        assert_eq!(
            reference["name"], secret_name,
            "{var} comes from the Secret"
        );
        reference
    };
    let key = from_secret("MCP_SUPERVISOR_SESSION_KEY");
    assert!(
        secret_keys.contains(str_at(key, "/key")) && key.get("optional").is_none(),
        "the session key is a required key of the Secret: {key}"
    );
    let previous = from_secret("MCP_SUPERVISOR_SESSION_KEY_PREVIOUS");
    assert_eq!(previous["optional"], true, "the previous key is optional");
    let token_var = flag("--auth-token-env");
    assert_eq!(token_var.len(), 1, "the HTTP face requires a bearer token");
    let token = from_secret(token_var[0]);
    assert!(secret_keys.contains(str_at(token, "/key")));
    let secret_text = std::fs::read_to_string(deploy_dir().join("secret.yaml")).expect("read");
    assert!(
        secret_text.contains("head -c 32 /dev/urandom | base64"),
        "secret.yaml says how to generate the key"
    );

    // The config from the ConfigMap, mounted where --config reads it, and a valid config.
    let cm_name = str_at(configmap, "/metadata/name");
    let volumes = pod["spec"]["volumes"].as_array().expect("volumes");
    let config_volume = volumes
        .iter()
        .find(|v| v["configMap"]["name"] == cm_name)
        .expect("a volume of the ConfigMap");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["name"] == config_volume["name"])
        .expect("the ConfigMap volume is mounted");
    assert_eq!(mount["mountPath"], "/etc/mcp-supervisor");
    assert_eq!(mount["readOnly"], true);
    if let Some(items) = config_volume["configMap"]["items"].as_array() {
        assert!(
            items
                .iter()
                .any(|i| i["key"] == "servers.json" && i["path"] == "servers.json"),
            "servers.json is projected under its name: {items:?}"
        );
    }
    let config = str_at(configmap, "/data/servers.json");
    let dir = std::env::temp_dir().join(format!("mcp-supervisor-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config_path = dir.join("servers.json");
    std::fs::write(&config_path, config).expect("write the config");
    let check = run(Command::new(env!("CARGO_BIN_EXE_mcp-supervisor"))
        .arg("check")
        .arg("--config")
        .arg(&config_path));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        check.status.success(),
        "`check` refuses the ConfigMap's servers.json:\n{}{}",
        text(&check.stdout),
        text(&check.stderr)
    );

    // Every flag the Deployment passes is one `serve` has.
    let help = run(Command::new(env!("CARGO_BIN_EXE_mcp-supervisor")).args(["serve", "--help"]));
    let help = text(&help.stdout);
    for arg in args.iter().filter(|a| a.starts_with("--")) {
        let known = help
            .split(|c: char| c.is_whitespace() || c == ',')
            .any(|word| word == *arg);
        assert!(known, "`serve --help` has no {arg}:\n{help}");
    }

    // Locked down: non-root, read-only root, no escalation, no capabilities; sized.
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    let sc = &container["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    for field in ["/requests/cpu", "/requests/memory", "/limits/memory"] {
        assert!(
            container["resources"].pointer(field).is_some(),
            "resources{field} is set"
        );
    }

    // The Service and the PodDisruptionBudget select the Deployment's pods.
    assert!(
        selects(&service["spec"]["selector"], pod_labels),
        "the Service selects the pods"
    );
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    assert!(
        selects(&pdb["spec"]["selector"]["matchLabels"], pod_labels),
        "the PodDisruptionBudget selects the pods"
    );
    let budget_ok = match (
        pdb["spec"]["minAvailable"].as_u64(),
        pdb["spec"]["maxUnavailable"].as_u64(),
    ) {
        (Some(min), None) => min >= 2 && min < replicas,
        (None, Some(max)) => max == 1,
        _ => false,
    };
    assert!(
        budget_ok,
        "minAvailable 2 or maxUnavailable 1: {}",
        pdb["spec"]
    );

    // The optional autoscaler scales this Deployment and never below its replicas.
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], name);
    assert!(u64_at(hpa, "/spec/minReplicas") >= replicas);

    // kustomization.yaml lists every required manifest, and only those.
    let kustomization = &docs["kustomization.yaml"][0];
    let listed: BTreeSet<&str> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a file name"))
        .collect();
    let required: BTreeSet<&str> = MANIFESTS
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| !OPTIONAL.contains(f))
        .collect();
    assert_eq!(
        listed, required,
        "kustomization.yaml lists the required manifests"
    );
}
