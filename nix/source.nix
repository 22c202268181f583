# The files the Go build reads, as a lib.fileset. The vendor directory that
# buildGoModule computes depends on the imports of every package in the
# module, so every .go file of the repository (tests/ too) and any nested
# go.mod is included, as in the tree that .ci/nix-check.sh hashes; agent/
# and policy/ are included whole for any //go:embed files. nix/package.nix
# builds from it; nix/eval/flake-outputs.nix lists it.
{ lib }:
lib.fileset.unions [
  ../go.mod
  ../go.sum
  (lib.fileset.fileFilter (
    file:
    file.hasExt "go"
    || lib.elem file.name [
      "go.mod"
      "go.sum"
      "go.work"
    ]
  ) ../.)
  (lib.fileset.maybeMissing ../agent)
  (lib.fileset.maybeMissing ../policy)
]
