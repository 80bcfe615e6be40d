"""The route world: model servers behind paths, a gateway, and the world changed live.

:mod:`.model_server` is the OpenAI-compatible stand-in for a model site;
:mod:`.common` holds what both runs share (the mix, the gateway's config);
:mod:`.loopback` runs the world on loopback, :mod:`.namespaces` in network namespaces
behind emulated paths (the bench). Nothing here imports the views or the CLI.
"""
