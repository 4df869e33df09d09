package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cellpay/cellpay/internal/operators"
)

// operatorsFile is the GTR's operators file that `operators init` writes
// beside the token files.
const operatorsFile = "operators.yaml"

// initRoles are the operators `operators init` makes: one per role, the
// operator ID the role's name, as the local platform does.
var initRoles = []operators.Role{operators.RoleViewer, operators.RoleOperator, operators.RoleAdmin}

// operatorsInit is `gtrctl operators init DIR`, which needs no GTR: it
// writes DIR/ROLE.token (mode 0600) for viewer, operator and admin and
// DIR/operators.yaml, the GTR's operators file (GTR_OPERATORS: IDs, roles
// and token hashes, never a token). It never overwrites: with every file
// present and each token authenticating with its role it keeps them; with
// only some present it fails, naming them, so that a partial secret store
// is restored rather than silently replaced.
func operatorsInit(_ context.Context, c *cli, args []string) error {
	if len(args) != 1 {
		return errUsage
	}
	dir := args[0]
	files := []string{filepath.Join(dir, operatorsFile)}
	for _, r := range initRoles {
		files = append(files, filepath.Join(dir, r.String()+".token"))
	}
	var present, missing []string
	for _, f := range files {
		switch _, err := os.Stat(f); {
		case err == nil:
			present = append(present, f)
		case errors.Is(err, fs.ErrNotExist):
			missing = append(missing, f)
		default:
			return err
		}
	}
	switch {
	case len(missing) == 0:
		if err := checkOperators(dir); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "kept %s and its %d tokens\n", files[0], len(initRoles))
		return nil
	case len(present) > 0:
		return fmt.Errorf("operators init: %v exist but %v do not: restore them from your secret store, or remove all to make new tokens", present, missing)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var f operators.File
	for _, r := range initRoles {
		tok, op, err := operators.NewToken(nil, r.String(), r)
		if err != nil {
			return err
		}
		if err := operators.WriteTokenFile(filepath.Join(dir, r.String()+".token"), tok); err != nil {
			return err
		}
		f.Operators = append(f.Operators, op)
	}
	if err := operators.WriteFile(files[0], &f); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "wrote %s and a token per role (%v) in %s\n", files[0], initRoles, dir)
	return nil
}

// checkOperators says whether each role's token in dir authenticates with
// that role against dir's operators file.
func checkOperators(dir string) error {
	f, err := operators.Load(filepath.Join(dir, operatorsFile))
	if err != nil {
		return err
	}
	ix, err := operators.Compile(f, "")
	if err != nil {
		return err
	}
	for _, r := range initRoles {
		tok, err := operators.ReadTokenFile(filepath.Join(dir, r.String()+".token"))
		if err != nil {
			return err
		}
		op, err := ix.Authenticate(tok)
		if err != nil || op.Role != r {
			return fmt.Errorf("operators init: %s.token is not the %s of %s", r, r, operatorsFile)
		}
	}
	return nil
}
