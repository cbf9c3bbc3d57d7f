"""`fastmmeval evolve`: a new version of a multiple-choice benchmark from fresh images of the same
distribution (MMBench-Live's method): spec -> visual patterns -> acquisition plan -> feedback-controlled
acquisition -> generation with a declarative solution plan -> tool-run, vision-blind verification ->
`<task>_live_v<N>` in the original's schema and protocol."""
