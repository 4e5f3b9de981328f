//! The scheduling core stays pure: no Kubernetes client types, no async runtime, no clock.
//! (Time is an argument; the same snapshot always gives the same decisions.)

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn core_mentions_no_kube_tokio_or_clock() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(files.len() > 5, "found only {files:?}");
    let forbidden = [
        "kube::",
        "k8s_openapi",
        "tokio",
        "SystemTime::now",
        "Instant::now",
        "std::time::SystemTime",
        "std::time::Instant",
        "thread_rng",
        "std::fs",
        "std::net",
    ];
    let mut hits = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            for bad in forbidden {
                if line.contains(bad) {
                    hits.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "the core must stay pure:\n{}",
        hits.join("\n")
    );
}
