"""The bottom modules every package may import: errors, units, the scale model, the project's paths,
ownership of what root makes. They import nothing of the project."""
