// Lists the tools of an MCP server started as COMMAND ARGS... through the
// official TypeScript SDK (Client + StdioClientTransport), as an agent
// would: prints their names, one per line. Used by test_client_setup.sh on
// the sandbox-mcp its one-line installer put in a user's home.
// Usage: node list_tools.mjs COMMAND [ARG...]   (the environment is passed on)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const [command, ...args] = process.argv.slice(2);
if (!command) {
  console.error('usage: node list_tools.mjs COMMAND [ARG...]');
  process.exit(2);
}
const transport = new StdioClientTransport({ command, args, env: { ...process.env }, stderr: 'inherit' });
const client = new Client({ name: 'sandbox-setup-check', version: '1.0.0' });
await client.connect(transport);
const { tools } = await client.listTools();
for (const t of tools) console.log(t.name);
await client.close();
