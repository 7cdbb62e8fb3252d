# The `slipway` command.
