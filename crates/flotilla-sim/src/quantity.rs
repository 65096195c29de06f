//! Resource quantities as numbers, for fitting pods onto nodes: every quantity in milli-units
//! (`500m` CPU = 500, `1Gi` memory = 1073741824000), rounded up as the scheduler rounds.

/// The value of a Kubernetes quantity in milli-units, or `None` when it is not one.
pub fn milli(text: &str) -> Option<i128> {
    flotilla_api::interpreter::milli_value(text).ok().map(i128::from)
}

#[cfg(test)]
mod tests {
    use super::milli;

    #[test]
    fn quantities_in_milli_units() {
        assert_eq!(milli("500m"), Some(500));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(milli("0.5"), Some(500));
        assert_eq!(milli("1Gi"), Some(1_073_741_824_000));
        assert_eq!(milli("128974848"), Some(128_974_848_000));
        assert_eq!(milli("129M"), Some(129_000_000_000));
        assert_eq!(milli("1e3"), Some(1_000_000));
        assert_eq!(milli("1n"), Some(1));
        assert_eq!(milli("x"), None);
        assert_eq!(milli("1Qi"), None);
    }
}
