/**
 * Every `export` in src/ is either part of a public entry (package.json `exports`) or imported
 * by another file of the project. An export nothing imports is dead code, or an internal that
 * leaks into the shipped types; either way it is a decision nobody made.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

// Compiled to dist/test/package/: the repository root is three levels up.
const root = fileURLToPath(new URL('../../../', import.meta.url)).replace(/\/$/, '');

/** The source file behind each public entry: ./dist/src/x/index.js -> src/x/index.ts. */
function entryFiles(): string[] {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { exports: Record<string, { default: string }> };
  return Object.values(pkg.exports).map((e) => join(root, e.default.replace(/^\.\/dist\//, '').replace(/\.js$/, '.ts')));
}

/** Exports used from elsewhere: `import`, `export ... from`, `import()`, by module symbol and name. */
function unusedExports(): string[] {
  const config = ts.getParsedCommandLineOfConfigFile(join(root, 'tsconfig.json'), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} });
  assert.ok(config !== undefined, 'tsconfig.json could not be read');
  // Only the project's own files: what imports what among them needs no lib.d.ts, no @types and
  // no driver's types (their files are most of a full program: 2,600 files against 470, and a
  // third of the time). A package specifier ('pg', 'node:fs') stays unresolved, which is right:
  // only imports of src/ files count here.
  const program = ts.createProgram(config.fileNames, { ...config.options, noResolve: true, noLib: true, types: [] });
  const checker = program.getTypeChecker();
  const entries = new Set(entryFiles());
  const used = new Set<string>();
  const useAll = (mod: ts.Symbol): void => {
    for (const e of checker.getExportsOfModule(mod)) used.add(`${mod.name}:${e.name}`);
  };
  for (const sf of program.getSourceFiles()) {
    if (sf.fileName.includes('/node_modules/')) continue;
    const visit = (n: ts.Node): void => {
      if ((ts.isImportDeclaration(n) || ts.isExportDeclaration(n)) && n.moduleSpecifier !== undefined) {
        const mod = checker.getSymbolAtLocation(n.moduleSpecifier);
        if (mod !== undefined) {
          if (ts.isImportDeclaration(n)) {
            const clause = n.importClause;
            if (clause?.name !== undefined) used.add(`${mod.name}:default`);
            const nb = clause?.namedBindings;
            if (nb !== undefined && ts.isNamespaceImport(nb)) useAll(mod);
            else if (nb !== undefined) for (const el of nb.elements) used.add(`${mod.name}:${(el.propertyName ?? el.name).text}`);
          } else if (n.exportClause === undefined) useAll(mod);
          else if (ts.isNamedExports(n.exportClause)) for (const el of n.exportClause.elements) used.add(`${mod.name}:${(el.propertyName ?? el.name).text}`);
        }
      } else if (ts.isCallExpression(n) && n.expression.kind === ts.SyntaxKind.ImportKeyword && n.arguments[0] !== undefined) {
        const mod = checker.getSymbolAtLocation(n.arguments[0]);
        if (mod !== undefined) useAll(mod);
      }
      ts.forEachChild(n, visit);
    };
    visit(sf);
  }
  const unused: string[] = [];
  for (const sf of program.getSourceFiles()) {
    if (!sf.fileName.startsWith(`${root}/src/`) || entries.has(sf.fileName)) continue;
    const mod = checker.getSymbolAtLocation(sf);
    if (mod === undefined) continue;
    for (const e of checker.getExportsOfModule(mod)) {
      if (!used.has(`${mod.name}:${e.name}`)) unused.push(`${sf.fileName.slice(root.length + 1)}: ${e.name}`);
    }
  }
  return unused;
}

void describe('exports', () => {
  void it('every export in src/ is public (a package entry) or imported by another file', () => {
    // bin/leasehold.js (plain JavaScript, outside the program) imports the CLI's main().
    const allowed = new Set(['src/cli/main.ts: main']);
    assert.deepEqual(
      unusedExports().filter((u) => !allowed.has(u)),
      [],
      'exports nothing imports: drop the `export`, delete the code, or re-export it from a public entry',
    );
  });
});
