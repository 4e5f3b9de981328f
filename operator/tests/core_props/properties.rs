//! The property tests themselves: each invariant over random worlds, exclusive gangs'
//! reservations, the simulator's path against a fresh cycle, `feasible::check` against the
//! cycle, and the short-limit credit's bounds.

use super::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn nothing_is_overallocated_and_gangs_are_whole(w in world()) {
        let cfg = Config::default();
        let s = build(&w, &cfg);
        let d = schedule(&s, NOW, &cfg);
        check_no_overallocation(&s, &d);
        check_whole_gang(&s, &d);
    }

    #[test]
    fn a_gang_that_fits_one_leaf_is_not_spread(w in world()) {
        let cfg = cfg_plain();
        let s = build(&w, &cfg);
        let d = schedule(&s, NOW, &cfg);
        check_single_leaf_fits_stay_whole(&s, &d);
    }

    #[test]
    fn backfill_never_delays_the_top_reservation(w in world()) {
        let cfg = Config::default();
        let s = build(&w, &cfg);
        let d = schedule(&s, NOW, &cfg);
        check_reservation_not_delayed(&s, &d, &cfg);
    }

    #[test]
    fn decisions_are_deterministic_and_order_free(w in world(), rot in 0usize..50) {
        let cfg = Config::default();
        let s = build(&w, &cfg);
        let d = schedule(&s, NOW, &cfg);
        prop_assert_eq!(&schedule(&s, NOW, &cfg), &d);
        // Same jobs in another order.
        let mut p = s.clone();
        let k = rot % p.pending.len().max(1);
        p.pending.rotate_left(k);
        p.running.reverse();
        prop_assert_eq!(&schedule(&p, NOW, &cfg), &d);
        // Same nodes in another order (ids renumbered).
        let mut q = s.clone();
        let n = q.nodes.len();
        let perm: Vec<usize> = (0..n).map(|i| (i * 7 + rot) % n).collect();
        if perm.iter().collect::<BTreeSet<_>>().len() == n {
            let mut inv = vec![0u32; n];
            for (new, &old) in perm.iter().enumerate() {
                inv[old] = new as u32;
            }
            q.nodes = std::sync::Arc::new(perm.iter().map(|&old| s.nodes[old].clone()).collect());
            for r in &mut q.running {
                for t in &mut r.tasks {
                    t.node = inv[t.node as usize];
                }
            }
            let dq = schedule(&q, NOW, &cfg);
            prop_assert_eq!(canonical(&q, &dq), canonical(&s, &d));
        }
    }
}

/// All-exclusive whole-node gangs: every reservation (not only the top one) still fits at
/// its time when the jobs reserved before it hold their planned nodes.
#[derive(Clone, Debug)]
struct Gangs {
    leaves: u32,
    per_leaf: u32,
    running: Vec<(u32, u32, u32)>,
    pending: Vec<(u32, u32)>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_reservation_holds_for_exclusive_gangs(
        g in (1u32..=4, 2u32..=5,
              prop::collection::vec((1u32..=6, 1u32..=60, 0u32..=59), 0..8),
              prop::collection::vec((1u32..=8, 1u32..=120), 1..12))
            .prop_map(|(leaves, per_leaf, running, pending)| Gangs { leaves, per_leaf, running, pending })
    ) {
        let spec = ClusterSpec::tree("gangs", 1, g.leaves, g.per_leaf, 8);
        let mut s = Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology());
        let cfg = Config::default();
        s.pending = g.running.iter().enumerate().map(|(i, &(n, m, _))| {
            PendingJob::new(1000 + i as u64, NOW - 10_000, JobRequest::nodes(n, 8).exclusive().time(u64::from(m) * 60))
        }).collect();
        let d0 = schedule(&s, NOW - 10_000, &Config { max_reservations: 0, ..cfg.clone() });
        s.apply(&d0, NOW - 10_000);
        s.pending.clear();
        for (r, &(_, m, back)) in s.running.iter_mut().zip(&g.running) {
            r.start_time = NOW - 60 * i64::from(back.min(m - 1));
        }
        s.pending = g.pending.iter().enumerate().map(|(i, &(n, m))| {
            PendingJob::new(i as u64 + 1, NOW - i as i64, JobRequest::nodes(n, 8).exclusive().time(u64::from(m) * 60))
        }).collect();
        let d = schedule(&s, NOW, &cfg);
        check_no_overallocation(&s, &d);
        let mut after = s.clone();
        after.apply(&d, NOW);
        for (k, r) in d.reservations.iter().enumerate() {
            let t = r.start_time;
            let mut at = after.clone();
            at.running.retain(|j| j.end_time().is_none_or(|e| e > t));
            // Earlier reservations that still run at t hold their nodes.
            for (i, e) in d.reservations[..k].iter().enumerate() {
                let job = &after.pending.iter().find(|j| j.id == e.job).unwrap();
                let lim = job.request.time_limit.and_then(|x| x.seconds()).unwrap() as i64;
                if e.start_time <= t && t < e.start_time + lim {
                    at.running.push(RunningJob {
                        id: 90_000 + i as u64,
                        start_time: e.start_time,
                        time_limit: Some(lim as u64),
                        exclusive: true,
                        tasks: e.nodes.iter().map(|&n| TaskAlloc { node: n, ..Default::default() }).collect(),
                        ..Default::default()
                    });
                }
            }
            let job = after.pending.iter().find(|j| j.id == r.job).unwrap().clone();
            at.pending = vec![job];
            let d2 = schedule(&at, t, &cfg);
            prop_assert!(d2.starts.iter().any(|x| x.job == r.job),
                "reservation {k} (job {}) at +{}s does not fit then: {:?}", r.job, t - NOW, d2.pending);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The simulator's path (an `Occupancy` kept between cycles and updated as jobs start,
    /// stop and end) decides exactly what a fresh cycle over the same snapshot decides.
    #[test]
    fn an_occupancy_kept_between_cycles_decides_like_a_fresh_cycle(h in history()) {
        let cfg = Config::default();
        let mut s = history_start(&h);
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let mut occ = Occupancy::new(&prep, &s);
        // The reference: future events derived from the node states in every cycle.
        let mut plain = Occupancy::new_uncached(&prep, &s);
        let mut now = NOW;
        let mut next_id = 5_000u64;
        for (dt, ends, arrivals) in &h.steps {
            let fresh = schedule_prepared(&prep, &s, now, &cfg);
            let inc = schedule_incremental(&prep, &mut occ, &s, now, &cfg);
            prop_assert_eq!(&inc, &fresh);
            prop_assert_eq!(&schedule_incremental(&prep, &mut plain, &s, now, &cfg), &fresh);
            // A second call sees the occupancy unchanged by the first.
            prop_assert_eq!(&schedule_incremental(&prep, &mut occ, &s, now, &cfg), &fresh);
            let before: BTreeSet<JobId> = s.running.iter().map(|j| j.id).collect();
            s.apply(&fresh, now);
            for j in &s.running {
                if !before.contains(&j.id) {
                    occ.add(&prep, &s, j);
                    plain.add(&prep, &s, j);
                } else if let Some(since) = j.stopping_since {
                    occ.set_stopping(&prep, j.id, since);
                    plain.set_stopping(&prep, j.id, since);
                }
            }
            prop_assert_eq!(occ.len(), s.running.len());
            now += i64::from(*dt);
            for id in history_step(&mut s, now, *ends, arrivals, &mut next_id) {
                occ.remove_job(&prep, id);
                plain.remove_job(&prep, id);
            }
        }
    }

    /// The operator's path: a `KeptOccupancy` that is only ever shown whole snapshots (the
    /// running list in any order, jobs gone, new, or changed — being stopped) decides
    /// exactly what a fresh cycle over the same snapshot decides.
    #[test]
    fn a_kept_occupancy_over_fresh_snapshots_decides_like_a_fresh_cycle(
        h in history(),
        rot in 0usize..50,
    ) {
        let cfg = Config::default();
        let mut s = history_start(&h);
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let mut kept = KeptOccupancy::new();
        let mut now = NOW;
        let mut next_id = 5_000u64;
        for (i, (dt, ends, arrivals)) in h.steps.iter().enumerate() {
            // The snapshot as the operator builds it: its running list in any order.
            if !s.running.is_empty() {
                let r = (rot + i) % s.running.len();
                s.running.rotate_left(r);
            }
            let fresh = schedule_prepared(&prep, &s, now, &cfg);
            prop_assert_eq!(&kept.schedule(&prep, &s, now, &cfg), &fresh);
            // Nothing changed: the same again.
            prop_assert_eq!(&kept.schedule(&prep, &s, now, &cfg), &fresh);
            s.apply(&fresh, now);
            now += i64::from(*dt);
            history_step(&mut s, now, *ends, arrivals, &mut next_id);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// `feasible::check` (what sbatch and admission refuse) and the cycle agree: a request it
    /// refuses the cycle can never start (BadConstraints), and one it accepts the cycle does
    /// not call impossible — on any cluster, with nodes down and GPUs unhealthy.
    #[test]
    fn feasibility_agrees_with_the_cycle(w in world(), g in job_gen(), scale in 1u32..=6) {
        let cfg = Config::default();
        let mut big = g.clone();
        big.a *= scale;
        big.cpus = big.cpus.map(|c| c * scale);
        big.mem_gib = big.mem_gib.map(|m| m * scale * scale);
        let empty = World { running: vec![], pending: vec![], ..w };
        let mut s = build(&empty, &cfg);
        let req = request(&big);
        s.pending = vec![PendingJob::new(1, NOW, req.clone())];
        let d = schedule(&s, NOW, &cfg);
        let refused = feasible::check(&req, &s.partitions[0], &s.nodes, None);
        let never = d.pending.iter().find(|p| p.reason == Reason::BadConstraints);
        prop_assert_eq!(
            refused.is_err(),
            never.is_some(),
            "check: {:?}, cycle: {:?}",
            refused,
            d.pending
        );
        if let (Err(e), Some(p)) = (refused, never) {
            // The cycle says the same, naming the resource.
            prop_assert_eq!(&p.message, &e.to_string());
        }
    }
}

/// Time limits of the order property's jobs (`None`: unlimited).
const LIMITS: [Option<u64>; 8] = [
    None,
    Some(600),
    Some(1_800),
    Some(3_600),
    Some(8 * 3_600),
    Some(86_400),
    Some(7 * 86_400),
    Some(40 * 86_400),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The short-limit credit's bounds (`priority`'s docs), on random queues of one-node jobs
    /// and two-node gangs submitted up to 12 days apart, for several credits: a job passes
    /// one submitted before it only with a larger short-limit factor (or the earlier one's was
    /// capped by an older gang) and less than the credit later, and a one-node job passes a
    /// gang only within the cap's time bounds.
    #[test]
    fn the_short_limit_credit_is_bounded_and_one_node_jobs_pass_gangs_only_within_the_cap(
        jobs in prop::collection::vec((0u32..12 * 86_400, 0usize..LIMITS.len(), prop::bool::weighted(0.25)), 1..40),
        credit in prop::sample::select(vec![0u64, 3_600, 86_400, 7 * 86_400]),
    ) {
        let spec = ClusterSpec::tree("order", 1, 2, 2, 8);
        let mut s = Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology());
        // Held, so each job is listed as the cycle reaches it: the queue order.
        s.pending = jobs
            .iter()
            .enumerate()
            .map(|(i, &(back, l, gang))| {
                let r = JobRequest::nodes(if gang { 2 } else { 1 }, 8);
                let r = match LIMITS[l] {
                    Some(t) => r.time(t),
                    None => r,
                };
                let mut j = PendingJob::new(i as u64 + 1, NOW - i64::from(back), r);
                j.hold = true;
                j
            })
            .collect();
        let cfg = Config { short_limit_age_secs: credit, ..Config::default() };
        let d = schedule(&s, NOW, &cfg);
        let info = |id: JobId| -> (i64, f64, bool) {
            let (back, l, gang) = jobs[(id - 1) as usize];
            let f = priority::short_limit_factor(LIMITS[l]);
            (NOW - i64::from(back), f, gang)
        };
        let order: Vec<JobId> = d.pending.iter().map(|p| p.job).collect();
        prop_assert_eq!(order.len(), jobs.len());
        for (a, &j) in order.iter().enumerate() {
            let (sj, fj, gang_j) = info(j);
            for &k in &order[a + 1..] {
                let (sk, fk, gang_k) = info(k);
                if sj <= sk {
                    continue;
                }
                // j was submitted after k and is ahead of it. A one-node job passes a gang
                // only once it has waited `pass_gangs_after_secs`, and only a gang that has
                // not yet waited `gang_firm_after_secs` (`capped_short_limit_factors`).
                let may_pass_gang = NOW - sj >= cfg.pass_gangs_after_secs as i64
                    && NOW - sk < cfg.gang_firm_after_secs as i64;
                prop_assert!(
                    gang_j || !gang_k || may_pass_gang,
                    "one-node job {} passed gang {}: {:?}", j, k, order
                );
                // With a larger factor — or k is a one-node job whose credit an older gang
                // capped.
                let capped = !gang_k
                    && jobs.iter().any(|&(back, _, gang)| gang && NOW - i64::from(back) <= sk);
                prop_assert!(
                    fj > fk || capped,
                    "job {} (factor {}) passed {} (factor {})", j, fj, k, fk
                );
                prop_assert!(
                    sj - sk <= credit as i64,
                    "job {} passed {} submitted {} s before it (credit {})",
                    j, k, sj - sk, credit
                );
            }
        }
    }
}
