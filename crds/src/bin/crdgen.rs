//! Writes every Muster CRD to `crds/yaml/` and the Helm chart's `charts/muster/crds/` (or only
//! to the directory given as the first argument). The output is committed; tests fail when
//! either copy drifts.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dirs = match std::env::args_os().nth(1) {
        Some(dir) => vec![PathBuf::from(dir)],
        // Helm installs CRDs only from the chart's own crds/ folder, so it holds a copy.
        None => vec![
            crate_dir.join("yaml"),
            crate_dir.join("../charts/muster/crds"),
        ],
    };
    for dir in dirs {
        std::fs::create_dir_all(&dir)?;
        for crd in muster_crds::crds() {
            let path = dir.join(muster_crds::crd_file_name(&crd));
            std::fs::write(&path, muster_crds::crd_yaml(&crd)?)?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}
