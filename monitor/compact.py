"""How many domains a view shows side by side with their numbers. Beyond it a heatmap's cells
are too small for a number: the report's figures, the dashboard and the terminal view switch
to a compact form (colour-only cells, panels stacked, tables of the worst domains first)."""

COMPACT_DOMAINS = 14
