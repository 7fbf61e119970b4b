"""Static data shipped with the function (see PROVENANCE.md)."""
