//! How much progress history a task keeps, and which points go when it
//! has too many. Pure: the thinner ([`super::Thinner`]) asks, the store
//! deletes.
//!
//! A task keeps every point up to [`MAX_POINTS`]. Past that its history is
//! thinned to about [`MAX_POINTS`] / 2: the points are cut into windows of
//! [`WINDOW`] consecutive points and each window keeps its lowest and its
//! highest episode return (a window without returns keeps its first point),
//! so a curve keeps its shape and its extremes. The newest point is always
//! kept. Thinning only deletes, so point ids — the `after` cursor of the
//! API — stay valid.

/// Most points a task keeps.
pub const MAX_POINTS: usize = 10_000;

/// Points per window when thinning; each window keeps two.
pub const WINDOW: usize = 4;

/// A stored point as thinning sees it: its id and its return.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stored {
    pub id: i64,
    pub episode_return: Option<f64>,
}

/// Whether a task with `count` points must be thinned.
pub fn over(count: usize) -> bool {
    count > MAX_POINTS
}

/// The ids to delete from `points` (oldest first) so that each window of
/// [`WINDOW`] keeps only its lowest and highest return.
pub fn thin(points: &[Stored]) -> Vec<i64> {
    let Some((newest, older)) = points.split_last() else {
        return vec![];
    };
    let mut delete = Vec::with_capacity(older.len());
    for window in older.chunks(WINDOW) {
        let keep = extremes(window);
        delete.extend(
            window
                .iter()
                .map(|p| p.id)
                .filter(|id| !keep.contains(id) && *id != newest.id),
        );
    }
    delete
}

/// The ids of the lowest and highest return of `window` (its first point
/// when none has a return).
fn extremes(window: &[Stored]) -> [i64; 2] {
    let with_return = window
        .iter()
        .filter_map(|p| p.episode_return.filter(|r| !r.is_nan()).map(|r| (p.id, r)));
    let mut low: Option<(i64, f64)> = None;
    let mut high: Option<(i64, f64)> = None;
    for (id, r) in with_return {
        if low.is_none_or(|(_, l)| r < l) {
            low = Some((id, r));
        }
        if high.is_none_or(|(_, h)| r > h) {
            high = Some((id, r));
        }
    }
    match (low, high) {
        (Some((l, _)), Some((h, _))) => [l, h],
        _ => [window[0].id; 2],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(returns: &[Option<f64>]) -> Vec<Stored> {
        returns
            .iter()
            .enumerate()
            .map(|(i, r)| Stored {
                id: i as i64 + 1,
                episode_return: *r,
            })
            .collect()
    }

    #[test]
    fn each_window_keeps_its_lowest_and_highest_return_and_the_newest_point_stays() {
        let p = points(&[
            Some(1.0),
            Some(5.0),
            Some(3.0),
            Some(-2.0), // window 1: keep 2 (5.0) and 4 (-2.0)
            None,
            None,
            Some(7.0),
            Some(7.0), // window 2: keep 7 (the first 7.0)
            Some(0.5), // the newest
        ]);
        assert_eq!(thin(&p), vec![1, 3, 5, 6, 8]);
    }

    #[test]
    fn a_window_without_returns_keeps_its_first_point() {
        let p = points(&[None, None, None, None, None]);
        assert_eq!(thin(&p), vec![2, 3, 4]);
    }

    #[test]
    fn thinning_a_full_history_leaves_at_most_half_the_bound() {
        let p: Vec<Stored> = (0..=MAX_POINTS)
            .map(|i| Stored {
                id: i as i64,
                episode_return: Some((i as f64).sin()),
            })
            .collect();
        assert!(over(p.len()));
        let kept = p.len() - thin(&p).len();
        assert!(kept <= MAX_POINTS / 2 + 1, "{kept}");
        assert!(!over(kept));
    }
}
