// The layering rules of src/ (issue 24), checked by scripts/layering.mjs inside `npm test`.
// A backend is one folder under src/backends/ behind its descriptor; only the registry
// (src/backends/index.ts) and the package's entries may reach into a folder, so a new store is
// its folder plus one line in the registry.
const { exports: entries } = require('./package.json');

// The package's entry modules (package.json "exports"), as source paths: they re-export each
// backend's public classes, which is what they are for.
const entrySources = Object.values(entries).map((e) => e.default.replace(/^\.\/dist\//, '').replace(/\.js$/, '.ts'));
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const entryPattern = `^(${entrySources.map(escape).join('|')})$`;

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-cycle',
      severity: 'error',
      comment: 'An import cycle in src/: the modules cannot be read, loaded or tested one at a time. Type-only cycles are allowed: they vanish at runtime.',
      from: { path: '^src/' },
      to: { circular: true, viaOnly: { dependencyTypesNot: ['type-only'] } },
    },
    {
      name: 'core-stays-core',
      severity: 'error',
      comment: 'src/core is the engine: it knows its port, its clock and nothing else (no driver, no fleet, no CLI). Move the type into core and let the outside implement it.',
      from: { path: '^src/core/' },
      to: { path: '^src/', pathNot: '^src/core/' },
    },
    {
      name: 'backend-behind-registry',
      severity: 'error',
      comment: "A backend's files are reached through its descriptor in the registry (src/backends/index.ts), or from a package entry that re-exports its public classes; add what you need to the descriptor instead.",
      from: { path: '^src/', pathNot: [`^src/backends/`, entryPattern] },
      to: { path: '^src/backends/[^/]+/' },
    },
    {
      name: 'backends-apart',
      severity: 'error',
      comment: 'One backend folder never imports another: what two share lives in src/backends/*.ts.',
      from: { path: '^src/backends/([^/]+)/' },
      to: { path: '^src/backends/[^/]+/', pathNot: '^src/backends/$1/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(dist|node_modules)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
