"""What a run writes to its folder: checkpoints (:mod:`.checkpoint`), metrics (:mod:`.logging`), plots
(:mod:`.plot`), each step's rollouts (:mod:`.step_rollouts`, with :mod:`.update_record`) and the summaries of a
batch of episodes behind the log line (:mod:`.rollout_stats`)."""
