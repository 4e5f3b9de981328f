//! Slurm value syntaxes (placeholder until the library lands).
