//! What another local user can do to selfheal: links and files planted where selfheal
//! writes ([`links`]), and values from a row or a host that must print as themselves,
//! secrets that must not ([`output`]).

pub(crate) mod devices;
pub(crate) mod links;
pub(crate) mod output;
