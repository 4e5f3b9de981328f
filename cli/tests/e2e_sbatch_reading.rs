//! Another site's script submits with `muster sbatch` alone on the test control plane with
//! the real operator: its unimplemented directives are read with one warning each, what
//! Muster implements on the same lines takes effect (`-N 2`, `--requeue`, `--time=-1`,
//! `--comment`, `-A`, `--signal`, `--open-mode`), and the job runs to completion.

mod e2e_support;

use e2e_support::Sim;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sites_script_runs() {
    let sim = Sim::start().await;
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts/edge/other_sites.sh");
    let script = script.to_str().unwrap();
    let (ok, out, err) = sim.run(&["sbatch", "--parsable", script]).await;
    assert!(ok, "{err}");
    let warnings: Vec<&str> = err.lines().collect();
    // --qos, --mail-type, --mail-user, --licenses; -A, --signal, --open-mode and --chdir
    // have their Slurm meaning and no warning.
    assert_eq!(warnings.len(), 4, "{err}");
    for opt in ["--qos", "--mail-type", "--mail-user", "--licenses"] {
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(&format!(": {opt} has no effect"))),
            "{opt}: {err}"
        );
    }
    assert!(
        warnings.iter().all(
            |w| w.starts_with(&format!("sbatch: warning: {script}: line "))
                && w.contains(" has no effect in Muster: ")
        ),
        "{err}"
    );
    let id: u64 = out.trim().parse().unwrap_or_else(|_| panic!("{out:?}"));
    let line = sim
        .until_squeue(id, "%j %T %D %l", |l| l.contains(" RUNNING "))
        .await;
    assert_eq!(line, "other_sites.sh RUNNING 2 UNLIMITED");
    let (ok, shown, err) = sim.run(&["scontrol", "show", "job", &id.to_string()]).await;
    assert!(ok, "{err}");
    assert!(shown.contains("\n   Comment=nightly run\n"), "{shown}");
    assert!(shown.contains("\n   Requeue=1 "), "{shown}");
    assert!(shown.contains("Account=myproject"), "{shown}");

    // The batch host's pod (node 0) ends the job with its exit.
    let pods = sim.pods_of(id).await;
    assert_eq!(pods.len(), 2, "{pods:?}");
    sim.finish(&pods[0], 0).await;
    let acct = sim
        .until_sacct(&id.to_string(), "JobID,State,Comment", |out| {
            out.contains("|COMPLETED|")
        })
        .await;
    assert_eq!(
        acct,
        format!("JobID|State|Comment\n{id}|COMPLETED|nightly run\n")
    );
    sim.stop().await;
}
