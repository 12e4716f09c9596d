from examples.mcp_server.server import main

main()
