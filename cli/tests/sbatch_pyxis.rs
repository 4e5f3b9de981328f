//! pyxis's `#SBATCH --container-*` lines as `muster sbatch` reads them (dry run): the
//! BatchJob fields they give, `--container-env` values from the submitting environment,
//! pyxis's `PYXIS_CONTAINER_*` variables, and every refusal of a script in one run.

mod common;

use std::collections::BTreeMap;

use common::sbatch_args;
use muster_cli::sbatch::manifest::Submitter;
use muster_cli::sbatch::{Prepared, ScriptInput, prepare};
use muster_crds::v1alpha1::BatchJob;

fn submit(text: &str, argv: &[&str], env: &[(&str, &str)]) -> Result<Prepared, String> {
    let mut full: Vec<&str> = argv.to_vec();
    full.push("job.sh");
    let args = sbatch_args(&full);
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = move |k: &str| env.get(k).cloned();
    prepare(
        &args,
        Some(ScriptInput {
            name: "job.sh".into(),
            default_job_name: "job.sh".into(),
            text: text.to_string(),
        }),
        &lookup,
        &Submitter {
            namespace: None,
            cwd: None,
        },
    )
    .map_err(|e| e.to_string())
}

fn env_of(j: &BatchJob) -> Vec<(String, String)> {
    j.spec
        .template
        .iter()
        .flat_map(|t| t.spec.iter())
        .flat_map(|s| s.containers.first())
        .flat_map(|c| c.env.iter().flatten())
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

/// pyxis's README example (`#SBATCH --container-image nvcr.io\#nvidia/pytorch:21.12-py3`,
/// the `#` escaped in a directive) and the other options, as fields of the BatchJob.
#[test]
fn directives_become_the_batchjobs_pyxis_fields() {
    let p = submit(
        "#!/bin/bash\n\
         #SBATCH --container-image nvcr.io\\#nvidia/pytorch:21.12-py3\n\
         #SBATCH --container-mounts=/scratch/u:/work,datasets:/data:ro\n\
         #SBATCH --container-mounts tmpfs:/fast\n\
         #SBATCH --container-workdir=/work\n\
         #SBATCH --container-env=TOKEN,HOME_ONLY,TOKEN\n\
         python -c 'import torch'\n",
        &[
            "--container-mounts=/scratch/cli:/cli",
            "--export=TOKEN=from-export",
        ],
        &[("TOKEN", "t0k3n")],
    )
    .unwrap();
    let s = &p.job.spec;
    assert_eq!(
        s.container_image.as_deref(),
        Some("nvcr.io#nvidia/pytorch:21.12-py3")
    );
    // Directives first, then the command line: they add up as pyxis's do.
    assert_eq!(
        s.container_mounts.as_deref(),
        Some("/scratch/u:/work,datasets:/data:ro,tmpfs:/fast,/scratch/cli:/cli")
    );
    assert_eq!(s.container_workdir.as_deref(), Some("/work"));
    // --container-env takes the submitting environment's value over --export's; an unset
    // name is left to the image.
    assert_eq!(env_of(&p.job), [("TOKEN".to_string(), "t0k3n".to_string())]);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn pyxis_environment_variables_give_what_no_option_gives() {
    let p = submit(
        "#!/bin/bash\n#SBATCH --container-workdir=/from-script\nhostname\n",
        &[],
        &[
            ("PYXIS_CONTAINER_IMAGE", "ubuntu:24.04"),
            ("PYXIS_CONTAINER_WORKDIR", "/from-env"),
            ("PYXIS_CONTAINER_MOUNTS", "tmpfs:/t"),
        ],
    )
    .unwrap();
    let s = &p.job.spec;
    assert_eq!(s.container_image.as_deref(), Some("ubuntu:24.04"));
    assert_eq!(s.container_workdir.as_deref(), Some("/from-script"));
    assert_eq!(s.container_mounts.as_deref(), Some("tmpfs:/t"));
    let e = submit(
        "#!/bin/bash\nhostname\n",
        &[],
        &[("PYXIS_CONTAINER_MOUNTS", "relative:dst")],
    )
    .unwrap_err();
    assert!(
        e.contains("environment variable PYXIS_CONTAINER_MOUNTS: invalid value 'relative:dst' for --container-mounts"),
        "{e}"
    );
}

/// Every problem of a script's pyxis lines in one run, each with its line.
#[test]
fn every_refusal_names_its_line() {
    let e = submit(
        "#!/bin/bash\n\
         #SBATCH --container-image=/lustre/pytorch.sqsh\n\
         #SBATCH --container-mounts=umount:/etc\n\
         #SBATCH --container-save=/scratch/out.sqsh\n\
         #SBATCH --container-remap-root\n\
         #SBATCH --container-name=x:bogus\n\
         #SBATCH --container-writable\n\
         hostname\n",
        &["--image=busybox", "--container-entrypoint"],
        &[],
    )
    .unwrap_err();
    for words in [
        "job.sh: line 2: invalid value '/lustre/pytorch.sqsh' for --container-image: a squashfs file",
        "job.sh: line 3: invalid value 'umount:/etc' for --container-mounts: \"umount:/etc\": umount removes a mount",
        "job.sh: line 4: invalid value '/scratch/out.sqsh' for --container-save: --container-save (pyxis) is not supported by Muster",
        "job.sh: line 5: --container-remap-root (pyxis) is not supported by Muster",
        "job.sh: line 6: invalid value 'x:bogus' for --container-name: flag must be",
        "--container-entrypoint (pyxis) is not supported by Muster: a node pod runs muster-step",
    ] {
        assert!(e.contains(words), "{words:?} not in:\n{e}");
    }
    assert!(!e.contains("line 7"), "{e}");
    // --image and --container-image together.
    let e = submit(
        "#!/bin/bash\n#SBATCH --container-image=ubuntu\nhostname\n",
        &["--image=busybox"],
        &[],
    )
    .unwrap_err();
    assert!(
        e.contains("--image (command line) and --container-image both set the job's image"),
        "{e}"
    );
}
