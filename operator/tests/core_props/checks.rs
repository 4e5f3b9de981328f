//! The invariants checked of a cycle's decisions: no over-allocation, whole gangs,
//! single-leaf fits kept whole, reservations not delayed; and a canonical form of decisions.

use super::*;

/// Every GPU, CPU and MiB held on each node by running jobs (that are not being stopped
/// right now) plus the starts of `d`; panics on a GPU given twice or an unhealthy GPU given.
pub(crate) fn check_no_overallocation(s: &Snapshot, d: &Decisions) {
    let stopping: BTreeSet<JobId> = d.stops.iter().map(|x| x.job).collect();
    let mut gpus: BTreeMap<(NodeId, u32), JobId> = BTreeMap::new();
    let mut cpu: BTreeMap<NodeId, u64> = BTreeMap::new();
    let mut mem: BTreeMap<NodeId, u64> = BTreeMap::new();
    let mut jobs_on: BTreeMap<NodeId, BTreeSet<JobId>> = BTreeMap::new();
    let mut exclusive: BTreeSet<(NodeId, JobId)> = BTreeSet::new();
    let mut add = |job: JobId, node: NodeId, g: &[u32], c: u64, m: u64, ex: bool, new: bool| {
        for &x in g {
            if let Some(other) = gpus.insert((node, x), job) {
                assert_eq!(
                    other, job,
                    "GPU {x} of node {node} given to {other} and {job}"
                );
            }
            if new {
                let gpu = s.nodes[node as usize]
                    .gpus
                    .iter()
                    .find(|y| y.index == x)
                    .unwrap();
                assert!(
                    gpu.healthy,
                    "job {job} got unhealthy GPU {x} on node {node}"
                );
                assert!(
                    s.nodes[node as usize].schedulable(),
                    "job {job} placed on down node {node}"
                );
            }
        }
        *cpu.entry(node).or_default() += c;
        *mem.entry(node).or_default() += m;
        jobs_on.entry(node).or_default().insert(job);
        if ex {
            exclusive.insert((node, job));
        }
    };
    for r in &s.running {
        let _ = &stopping;
        for t in &r.tasks {
            add(
                r.id,
                t.node,
                &t.gpus,
                t.cpu_millis,
                t.memory_mib,
                r.exclusive,
                false,
            );
        }
    }
    for st in &d.starts {
        for t in &st.tasks {
            add(
                st.job,
                t.node,
                &t.gpus,
                t.cpu_millis,
                t.memory_mib,
                st.exclusive,
                true,
            );
        }
    }
    for (&n, &c) in &cpu {
        assert!(
            c <= s.nodes[n as usize].cpu_millis,
            "node {n}: {c} millicores allocated"
        );
    }
    for (&n, &m) in &mem {
        assert!(
            m <= s.nodes[n as usize].memory_mib,
            "node {n}: {m} MiB allocated"
        );
    }
    for (n, j) in exclusive {
        assert_eq!(
            jobs_on[&n].len(),
            1,
            "exclusive job {j} shares node {n} with {:?}",
            jobs_on[&n]
        );
    }
    // --exclusive=user: a node with such a job has jobs of that user only.
    let mut user_of: BTreeMap<JobId, Option<String>> = BTreeMap::new();
    let mut locks: BTreeSet<(NodeId, JobId)> = BTreeSet::new();
    for r in &s.running {
        user_of.insert(r.id, r.user.clone());
        if r.exclusive_user {
            locks.extend(r.tasks.iter().map(|t| (t.node, r.id)));
        }
    }
    for st in &d.starts {
        let job = s.pending.iter().find(|j| j.id == st.job).unwrap();
        user_of.insert(st.job, job.user.clone());
        if job.request.exclusive_user && !st.exclusive {
            assert!(job.user.is_some(), "job {} of no user shares nodes", st.job);
            locks.extend(st.tasks.iter().map(|t| (t.node, st.job)));
        }
        // --nodelist nodes are in, --exclude nodes are out.
        let names: BTreeSet<&str> = st
            .nodes
            .iter()
            .map(|&n| s.nodes[n as usize].name.as_str())
            .collect();
        for w in &job.request.nodelist {
            assert!(names.contains(w.as_str()), "job {} lacks {w}", st.job);
        }
        for x in &job.request.exclude {
            assert!(
                !names.contains(x.as_str()),
                "job {} on excluded {x}",
                st.job
            );
        }
    }
    for (n, j) in locks {
        for other in &jobs_on[&n] {
            assert!(
                user_of[other].is_some() && user_of[other] == user_of[&j],
                "node {n}: job {other} of {:?} beside exclusive=user job {j} of {:?}",
                user_of[other],
                user_of[&j]
            );
        }
    }
}

/// Whether some job (running or pending) keeps nodes to its user: estimates do not see that
/// rule (ARCHITECTURE.md), so checks that replay estimates skip such worlds.
pub(crate) fn any_user_rule(s: &Snapshot) -> bool {
    s.running.iter().any(|r| r.exclusive_user)
        || s.pending
            .iter()
            .any(|p| p.request.exclusive_user && !p.request.exclusive)
}

/// Tasks and GPUs of a start match what the job asked for.
pub(crate) fn check_whole_gang(s: &Snapshot, d: &Decisions) {
    let seen: BTreeSet<JobId> = d
        .starts
        .iter()
        .map(|x| x.job)
        .chain(d.pending.iter().map(|p| p.job))
        .collect();
    assert_eq!(
        seen.len(),
        d.starts.len() + d.pending.len(),
        "a job decided twice"
    );
    assert_eq!(
        seen.len(),
        s.pending.len(),
        "a pending job without a decision"
    );
    for st in &d.starts {
        let job = s.pending.iter().find(|j| j.id == st.job).unwrap();
        let dm = normalize(&job.request, &s.partitions[0]).unwrap();
        let nodes: BTreeSet<NodeId> = st.tasks.iter().map(|t| t.node).collect();
        assert_eq!(nodes.len(), st.nodes.len());
        let n = nodes.len() as u32;
        assert!(
            n >= dm.min_nodes && n <= dm.max_nodes,
            "job {}: {n} nodes",
            st.job
        );
        let gpus = distinct_gpus(st.tasks.iter().map(|t| (t.node, t.gpus.as_slice()))) as u32;
        match dm.mode {
            Mode::Bundles { tasks_per_node } => {
                assert_eq!(st.tasks.len() as u32, n * tasks_per_node, "job {}", st.job);
                assert_eq!(gpus, n * dm.unit.gpus, "job {}", st.job);
            }
            Mode::Units {
                total,
                merge,
                tasks_per_unit,
                ..
            } => {
                let tasks = if merge { n } else { total * tasks_per_unit };
                assert_eq!(st.tasks.len() as u32, tasks, "job {}", st.job);
                assert_eq!(
                    gpus,
                    total * dm.unit.gpus + n * dm.node.gpus,
                    "job {}",
                    st.job
                );
            }
        }
        // Every task has GPUs when the job has (shared when they outnumber the node's).
        if dm.unit.gpus > 0 || dm.node.gpus > 0 {
            assert!(
                st.tasks.iter().all(|t| !t.gpus.is_empty()),
                "job {}",
                st.job
            );
        }
        for (i, t) in st.tasks.iter().enumerate() {
            assert_eq!(t.rank as usize, i);
            assert_eq!(st.nodes[t.node_rank as usize], t.node);
        }
        if let Some(ty) = &job.request.gpu_type {
            for t in &st.tasks {
                for g in &t.gpus {
                    let gpu = s.nodes[t.node as usize]
                        .gpus
                        .iter()
                        .find(|x| x.index == *g)
                        .unwrap();
                    assert!(gpu.model.to_lowercase().contains(ty), "wrong GPU type");
                }
            }
        }
    }
}

/// Without reservations, replays the starts in order and checks that a job that could
/// have fit under one leaf was not spread over several.
pub(crate) fn check_single_leaf_fits_stay_whole(s: &Snapshot, d: &Decisions) {
    let part = &s.partitions[0];
    // Free resources now, by node.
    let mut free: Vec<(Res, BTreeSet<u32>, bool)> = s
        .nodes
        .iter()
        .map(|n| {
            (
                Res {
                    gpus: 0,
                    cpu: n.cpu_millis,
                    mem: n.memory_mib,
                },
                n.gpus
                    .iter()
                    .filter(|g| g.healthy)
                    .map(|g| g.index)
                    .collect(),
                true,
            )
        })
        .collect();
    fn take(
        free: &mut [(Res, BTreeSet<u32>, bool)],
        node: NodeId,
        g: &[u32],
        c: u64,
        m: u64,
        ex: bool,
    ) {
        let f = &mut free[node as usize];
        for x in g {
            f.1.remove(x);
        }
        f.0.cpu = f.0.cpu.saturating_sub(c);
        f.0.mem = f.0.mem.saturating_sub(m);
        f.2 = false;
        if ex {
            f.1.clear();
            f.0 = Res::default();
        }
    }
    for r in &s.running {
        for t in &r.tasks {
            take(
                &mut free,
                t.node,
                &t.gpus,
                t.cpu_millis,
                t.memory_mib,
                r.exclusive,
            );
        }
    }
    let leaf_of = |n: NodeId| s.nodes[n as usize].labels.get(LEAF).cloned();
    for st in &d.starts {
        let job = s.pending.iter().find(|j| j.id == st.job).unwrap();
        let dm = normalize(&job.request, part).unwrap();
        let placed_by_rules =
            !job.request.nodelist.is_empty() || !job.request.exclude.is_empty() || any_user_rule(s);
        if st.leaves > 1 && job.request.gpu_type.is_none() && !placed_by_rules {
            // Capacity of each labelled leaf for this job at this point.
            let mut per_leaf: BTreeMap<String, (u64, u32)> = BTreeMap::new();
            for (i, n) in s.nodes.iter().enumerate() {
                if !n.schedulable() {
                    continue;
                }
                let Some(l) = leaf_of(i as NodeId) else {
                    continue;
                };
                let f = &free[i];
                let total = Res {
                    gpus: n.gpus.iter().filter(|g| g.healthy).count() as u32,
                    cpu: n.cpu_millis,
                    mem: n.memory_mib,
                };
                let avail = Res {
                    gpus: f.1.len() as u32,
                    ..f.0
                };
                let u = dm.units_fitting(avail, total, f.2);
                let e = per_leaf.entry(l).or_default();
                if u > 0 {
                    e.0 += u64::from(u);
                    e.1 += 1;
                }
            }
            for (l, (units, nodes)) in per_leaf {
                let fits = units >= u64::from(dm.need())
                    && nodes >= dm.min_nodes
                    && match dm.mode {
                        Mode::Bundles { .. } => true,
                        Mode::Units { max_per_node, .. } => {
                            u64::from(max_per_node) * u64::from(dm.max_nodes.min(nodes))
                                >= u64::from(dm.need())
                        }
                    };
                prop_assert_no_spread(fits, st, &l);
            }
        }
        for t in &st.tasks {
            take(
                &mut free,
                t.node,
                &t.gpus,
                t.cpu_millis,
                t.memory_mib,
                st.exclusive,
            );
        }
    }
}

pub(crate) fn prop_assert_no_spread(fits: bool, st: &Start, leaf: &str) {
    assert!(
        !fits,
        "job {} spans {} leaves although leaf {leaf} could hold it whole",
        st.job, st.leaves
    );
}

/// At the top reservation's time, with every job that started now still running until its
/// limit, the reserved job can start.
pub(crate) fn check_reservation_not_delayed(s: &Snapshot, d: &Decisions, cfg: &Config) {
    let Some(r) = d.reservations.first() else {
        return;
    };
    if any_user_rule(s) {
        return;
    }
    let mut later = s.clone();
    later.apply(d, NOW);
    let t = r.start_time;
    later.running.retain(|j| {
        let stopping = d.stops.iter().any(|x| x.job == j.id)
            || d.preemptions
                .iter()
                .any(|p| p.victims.iter().any(|v| v.job == j.id));
        !stopping && j.end_time().is_none_or(|e| e > t)
    });
    let job = later
        .pending
        .iter()
        .find(|j| j.id == r.job)
        .unwrap()
        .clone();
    later.pending = vec![job];
    let d2 = schedule(&later, t, cfg);
    assert!(
        d2.starts.iter().any(|x| x.job == r.job),
        "reserved job {} cannot start at its reserved time {}: {:?}",
        r.job,
        t - NOW,
        d2.pending
    );
}

/// Decisions as names, so that snapshots with renumbered nodes compare.
pub(crate) fn canonical(s: &Snapshot, d: &Decisions) -> String {
    let name = |n: NodeId| s.nodes[n as usize].name.clone();
    let mut out = String::new();
    for st in &d.starts {
        out += &format!(
            "start {} {:?} {}\n",
            st.job,
            st.nodes.iter().map(|&n| name(n)).collect::<Vec<_>>(),
            st.leaves
        );
        for t in &st.tasks {
            out += &format!(
                "  {} {} {:?} {} {}\n",
                t.rank,
                name(t.node),
                t.gpus,
                t.cpu_millis,
                t.memory_mib
            );
        }
    }
    for r in &d.reservations {
        out += &format!(
            "reserve {} {} {:?}\n",
            r.job,
            r.start_time,
            r.nodes.iter().map(|&n| name(n)).collect::<Vec<_>>()
        );
    }
    out += &format!("{:?}\n{:?}\n{:?}\n", d.preemptions, d.stops, d.pending);
    out
}
