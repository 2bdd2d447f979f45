//! Size classes: the few segment totals a padded batch may have.
//!
//! Every distinct input shape costs the model a warm-up (autotuning, allocator
//! growth, possibly a recompile), so batches are padded up to one of a handful
//! of totals instead of reaching the model at whatever size they happened to
//! fill to. This file owns the default ladder and the lookup.

/// Fractions of the budget, as (numerator, denominator), that make up the
/// default ladder. Dense near the top because well-filled batches land there;
/// sparse at the bottom where only stragglers (end of input, memory bound)
/// land, and padding a small batch to the next rung wastes little in absolute
/// terms.
const DEFAULT_LADDER: [(usize, usize); 6] = [(1, 16), (1, 8), (1, 4), (1, 2), (3, 4), (1, 1)];

/// Kernels tend to be tuned for multiples of 8; a class that is one keeps the
/// padded tensor on the fast path.
const CLASS_ALIGNMENT: usize = 8;

/// The default size classes for a segment budget: a short geometric ladder
/// (B/16, B/8, B/4, B/2, 3B/4, B), each rung rounded up to a multiple of 8
/// unless that would pass B, deduplicated and ascending. The last class is
/// exactly `max_segments`. Empty only for a zero budget, which validation
/// rejects before this is used.
pub fn default_size_classes(max_segments: usize) -> Vec<usize> {
    if max_segments == 0 {
        return Vec::new();
    }
    let mut classes: Vec<usize> = DEFAULT_LADDER
        .iter()
        .map(|&(num, den)| rung(max_segments, num, den))
        .collect();
    // Rounding can make neighbouring rungs equal on small budgets.
    classes.dedup();
    classes
}

/// Classes for a budget lowered mid-run: the old classes that still fit under
/// the new budget, with the new budget itself as the largest class (every batch
/// must still have a class to pad to).
pub(super) fn classes_under_budget(classes: &[usize], new_budget: usize) -> Vec<usize> {
    let mut lowered: Vec<usize> = classes
        .iter()
        .copied()
        .filter(|&class| class < new_budget)
        .collect();
    lowered.push(new_budget);
    lowered
}

/// Smallest class >= n, or None when n exceeds the largest class.
///
/// `classes` must be ascending (validation guarantees it for configured ones).
pub fn pad_to_class(classes: &[usize], n: usize) -> Option<usize> {
    let first_fitting = classes.partition_point(|&class| class < n);
    classes.get(first_fitting).copied()
}

/// One rung of the ladder: ceil(budget * num / den), at least 1, rounded up to
/// the alignment where that stays within the budget.
fn rung(budget: usize, num: usize, den: usize) -> usize {
    // Divide first so a huge budget cannot overflow; the remainder keeps the
    // result exact.
    let exact = (budget / den) * num + ((budget % den) * num).div_ceil(den);
    let at_least_one = exact.max(1);
    match at_least_one.checked_next_multiple_of(CLASS_ALIGNMENT) {
        Some(aligned) if aligned <= budget => aligned,
        _ => at_least_one.min(budget),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ladder_for_the_default_budget() {
        assert_eq!(
            default_size_classes(4096),
            vec![256, 512, 1024, 2048, 3072, 4096]
        );
    }

    #[test]
    fn rungs_round_up_to_multiples_of_eight() {
        assert_eq!(
            default_size_classes(1000),
            vec![64, 128, 256, 504, 752, 1000]
        );
    }

    #[test]
    fn small_budgets_dedupe_and_never_go_below_one() {
        assert_eq!(default_size_classes(1), vec![1]);
        assert_eq!(default_size_classes(2), vec![1, 2]);
        // Alignment wins where the budget allows it, collapsing tiny ladders.
        assert_eq!(default_size_classes(8), vec![8]);
        assert_eq!(default_size_classes(10), vec![8, 10]);
        assert_eq!(default_size_classes(7), vec![1, 2, 4, 6, 7]);
    }

    #[test]
    fn zero_budget_has_no_classes() {
        assert!(default_size_classes(0).is_empty());
    }

    #[test]
    fn huge_budget_does_not_overflow() {
        let classes = default_size_classes(usize::MAX);
        assert_eq!(classes.last(), Some(&usize::MAX));
        assert!(classes.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn default_classes_are_well_formed_for_many_budgets() {
        for budget in 1..=5000 {
            let classes = default_size_classes(budget);
            assert!(!classes.is_empty() && classes.len() <= 8, "{budget}");
            assert!(classes.windows(2).all(|w| w[0] < w[1]), "{budget}");
            assert!(classes.iter().all(|&c| c >= 1), "{budget}");
            assert_eq!(classes.last(), Some(&budget));
        }
    }

    #[test]
    fn pad_to_class_picks_the_smallest_fitting_class() {
        let classes = [8, 16, 32];
        assert_eq!(pad_to_class(&classes, 0), Some(8));
        assert_eq!(pad_to_class(&classes, 8), Some(8));
        assert_eq!(pad_to_class(&classes, 9), Some(16));
        assert_eq!(pad_to_class(&classes, 32), Some(32));
        assert_eq!(pad_to_class(&classes, 33), None);
        assert_eq!(pad_to_class(&[], 1), None);
    }

    #[test]
    fn lowering_keeps_smaller_classes_and_caps_with_the_budget() {
        assert_eq!(
            classes_under_budget(&[256, 512, 1024, 2048, 3072, 4096], 2048),
            vec![256, 512, 1024, 2048]
        );
        assert_eq!(
            classes_under_budget(&[256, 512, 1024], 700),
            vec![256, 512, 700]
        );
        assert_eq!(classes_under_budget(&[256, 512], 100), vec![100]);
    }
}
