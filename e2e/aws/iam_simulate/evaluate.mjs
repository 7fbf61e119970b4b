// Evaluates trust policies with @cloud-copilot/iam-simulate's core engine (authorize), as
// the token e2e asks: node evaluate.mjs INSTALL_DIR < cases.json > results.json.
//
// cases.json: [{"principal", "action", "resource", "accountId", "policy", "context"}]; each
// result is the engine's verdict (Allowed, ImplicitlyDenied, ExplicitlyDenied) in order.
// authorize, not runSimulation: the public entry point validates context keys against the
// service's list and drops the "<issuer>:sub" and "<issuer>:aud" keys an OIDC provider adds
// (every web-identity request then reads ImplicitlyDenied); runUnsafeSimulation reaches
// authorize but loads the resource policy without the name the engine reads (TypeError).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = join(process.argv[2], 'node_modules', '@cloud-copilot');
const load = (pkg, file) => import(pathToFileURL(join(modules, pkg, 'dist', 'esm', file)).href);
const { authorize } = await load('iam-simulate', 'core_engine/CoreSimulatorEngine.js');
const { AwsRequestImpl } = await load('iam-simulate', 'request/request.js');
const { RequestContextImpl } = await load('iam-simulate', 'requestContext.js');
const { DiscoveryContextKeyConstraints } = await load('iam-simulate', 'context_keys/discoveryContextKeyConstraints.js');
const { loadPolicy } = await load('iam-policy', 'index.js');

const cases = JSON.parse(readFileSync(0, 'utf8'));
const results = cases.map((c) => {
  const request = new AwsRequestImpl(
    c.principal,
    { resource: c.resource, accountId: c.accountId },
    c.action,
    new RequestContextImpl(c.context),
  );
  return authorize({
    request,
    sessionPolicy: undefined,
    identityPolicies: [],
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    resourcePolicy: loadPolicy(c.policy, { name: 'trust' }),
    permissionBoundaries: undefined,
    vpcEndpointPolicies: undefined,
    simulationParameters: {
      simulationMode: 'Strict',
      discoveryContextKeyConstraints: new DiscoveryContextKeyConstraints([]),
    },
  }).result;
});
process.stdout.write(JSON.stringify(results));
