//! Model backends. (Temporary: until the `ModelBackend` seam lands on main,
//! only the AOTInductor package module lives here.)

pub mod aoti;
