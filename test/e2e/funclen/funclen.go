// Package funclen measures the length of Go functions, so that the budget
// "no function over 80 lines in services/ and plugin/" (issue 50) is a
// number a test states rather than a reviewer's impression.
package funclen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Func is one function or method declaration and its length in lines, from
// the line of `func` to the line of its closing brace, both counted (its
// doc comment is not).
type Func struct {
	File  string // slash-separated, relative to the root given to Walk
	Line  int
	Name  string // Recv.Name for a method
	Lines int
}

func (f Func) String() string { return fmt.Sprintf("%s:%d %s %d", f.File, f.Line, f.Name, f.Lines) }

// Over returns the declarations of src (one file's text) longer than max
// lines. Generated files (a "Code generated ... DO NOT EDIT." line before
// the package clause) have none.
func Over(name string, src []byte, max int) ([]Func, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var long []Func
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
		if n := end - start + 1; n > max {
			long = append(long, Func{File: name, Line: start, Name: funcName(fn), Lines: n})
		}
	}
	return long, nil
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}

// Walk returns the functions longer than max lines in the non-test Go files
// below each of dirs (slash-separated, relative to root), skipping the
// directories whose relative path starts with one of skip, longest first.
func Walk(root string, dirs []string, skip []string, max int) ([]Func, error) {
	var long []Func
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				for _, s := range skip {
					if rel == s || strings.HasPrefix(rel, s+"/") {
						return filepath.SkipDir
					}
				}
				return nil
			}
			if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			found, err := Over(rel, src, max)
			if err != nil {
				return err
			}
			long = append(long, found...)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(long, func(i, j int) bool {
		if long[i].Lines != long[j].Lines {
			return long[i].Lines > long[j].Lines
		}
		return long[i].String() < long[j].String()
	})
	return long, nil
}
