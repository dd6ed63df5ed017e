// Command sbom writes a CycloneDX SBOM (JSON) of Go binaries: the main
// module and every module linked into each, with the Go release as the
// standard library's component, read from the build information the go
// command embeds (what `go version -m` prints), by
// github.com/CycloneDX/cyclonedx-gomod's binary generator.
//
// It is a module of its own, kept out of go.work, so that the generator's
// dependencies (go-git among them) never enter the module graph of the
// binaries ipledger ships; lab/cmd/ipledger-release builds and runs it.
//
// The serial number and timestamp are left out: the same binary always gives
// the same SBOM, and the release's SHA256SUMS stays reproducible.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/generate/bin"
	"github.com/rs/zerolog"
)

func main() {
	version := flag.String("version", "", "the version of each binary's main module (the release, v<VERSION>)")
	out := flag.String("out", ".", "directory that <binary><suffix>.cdx.json is written into")
	suffix := flag.String("suffix", "", "added to each file's name after the binary's, e.g. _linux_amd64")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "Usage: sbom [-version v0.3.0] [-out dir] [-suffix _linux_amd64] binary...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	for _, b := range flag.Args() {
		if err := write(b, *version, filepath.Join(*out, filepath.Base(b)+*suffix+".cdx.json")); err != nil {
			fmt.Fprintln(os.Stderr, "sbom:", err)
			os.Exit(1)
		}
	}
}

func write(binary, version, file string) error {
	opts := []bin.Option{bin.WithIncludeStdlib(true), bin.WithLogger(zerolog.Nop())}
	if version != "" {
		opts = append(opts, bin.WithVersionOverride(version))
	}
	g, err := bin.NewGenerator(binary, opts...)
	if err != nil {
		return err
	}
	bom, err := g.Generate()
	if err != nil {
		return fmt.Errorf("%s: %w", binary, err)
	}
	bom.SerialNumber = ""
	if bom.Metadata != nil {
		bom.Metadata.Timestamp = ""
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	enc := cdx.NewBOMEncoder(f, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
