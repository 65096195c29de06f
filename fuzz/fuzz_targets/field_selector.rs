//! Any text: parsing never panics, and a parsed selector prints a form that parses back to
//! the same selector and prints the same again.
#![no_main]

use flotilla_api::selector::FieldSelector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(selector) = FieldSelector::parse(text) else { return };
    let printed = selector.to_string();
    let again = FieldSelector::parse(&printed).unwrap_or_else(|e| panic!("{text:?} printed {printed:?}: {e}"));
    assert_eq!(again, selector, "{text:?} printed {printed:?}");
    assert_eq!(again.to_string(), printed);
});
