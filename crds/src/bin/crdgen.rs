//! Writes every Muster CRD to `crds/yaml/` (or the directory given as the first argument).
//! The output is committed; `cargo test -p muster-crds` fails when it drifts.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("yaml"));
    std::fs::create_dir_all(&dir)?;
    for crd in muster_crds::crds() {
        let path = dir.join(muster_crds::crd_file_name(&crd));
        std::fs::write(&path, muster_crds::crd_yaml(&crd)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
