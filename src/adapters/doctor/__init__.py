"""`ascend-doctor`: the operator's preflight (`check`) and dry-run plan (`plan -- <args>`)."""
