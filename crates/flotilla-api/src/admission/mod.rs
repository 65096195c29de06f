//! Admission placeholder.
