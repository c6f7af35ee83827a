//! What a person reads when something is wrong: every error a sentence with its
//! documented exit status ([`sentences`]), and a fix that fits the cause and the user
//! ([`fixes`]).

mod fixes;
mod sentences;
