package containerimage

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDockerfileMatchesSettings keeps the repository's Dockerfile (for users
// with Docker) and Build (make images) making the same image: the same go
// build, the same empty base, the same files, user and entrypoint. When it
// fails, change both, or neither.
func TestDockerfileMatchesSettings(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(string(data))
	if len(stages) != 2 {
		t.Fatalf("want a build stage and an image stage, got %d stages: %q", len(stages), stages)
	}
	build, image := stages[0], stages[1]

	wantBuild := strings.Join(GoBuildEnv, " ") + " go build " + shellJoin(GoBuildArgs(Provenance{Version: "${VERSION}", Revision: "${REVISION}"})) + " -o /out/ipledger ./services/$SERVICE/cmd/ipledger-$SERVICE"
	if !slices.ContainsFunc(build, func(in string) bool { return strings.HasPrefix(in, "RUN ") && strings.HasSuffix(in, wantBuild) }) {
		t.Errorf("the build stage has no RUN ending with\n  %s\n(GoBuildEnv and GoBuildArgs); it has:\n  %s", wantBuild, strings.Join(build, "\n  "))
	}
	for _, b := range Binaries {
		service := strings.TrimPrefix(b.Repository, Registry+"/")
		if want := strings.ReplaceAll("./services/$SERVICE/cmd/ipledger-$SERVICE", "$SERVICE", service); b.Package != want {
			t.Errorf("binary %s builds %s; the Dockerfile with SERVICE=%s builds %s", b.Name, b.Package, service, want)
		}
	}

	entrypoint, _ := json.Marshal([]string{Entrypoint})
	labels := Contents{Title: "ipledger-$SERVICE", Provenance: Provenance{Version: "$VERSION", Revision: "$REVISION"}}.labels()
	var label []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		label = append(label, k+"="+strconv.Quote(labels[k]))
	}
	want := []string{
		"FROM scratch",
		"ARG SERVICE",
		"ARG VERSION",
		"ARG REVISION",
		"LABEL " + strings.Join(label, " "),
		"COPY --from=build " + HostCACertificates + " " + CACertificates,
		"COPY --from=build /out/ipledger " + Entrypoint,
		"USER " + strconv.Itoa(UID) + ":" + strconv.Itoa(GID),
		"ENTRYPOINT " + string(entrypoint),
	}
	if !slices.Equal(image, want) {
		t.Errorf("the image stage is\n  %s\nwant (Build's settings)\n  %s", strings.Join(image, "\n  "), strings.Join(want, "\n  "))
	}
}

// parseDockerfile splits a Dockerfile into stages of instructions, each on
// one line (continuations joined, comments dropped).
func parseDockerfile(s string) [][]string {
	var stages [][]string
	var cur strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`))
			continue
		}
		cur.WriteString(line)
		in := strings.Join(strings.Fields(cur.String()), " ")
		cur.Reset()
		if strings.HasPrefix(in, "FROM ") {
			stages = append(stages, nil)
			if i := strings.Index(in, " AS "); i > 0 { // the build stage's name is the Dockerfile's business
				in = in[:i]
			}
			if len(stages) == 1 {
				continue
			}
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	return stages
}

// shellJoin quotes the arguments with a space as a shell would need.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if strings.Contains(a, " ") {
			q[i] = `"` + a + `"`
		}
	}
	return strings.Join(q, " ")
}
