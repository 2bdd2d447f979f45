//! What `inspect` tells of an encoded image column.
