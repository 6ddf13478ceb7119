package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// APIError is an answer of 400 or more. RouteAbsent says whether it was
// the router's own 404 (the daemon has no such route).
type APIError struct {
	Status      int
	Body        string
	RouteAbsent bool
}

func (e *APIError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

type Client struct {
	base  string
	token string
	hc    *http.Client
	// extended sends our switch (X-Sandbox-Extended: 1): only to show
	// that this client then fails on the keys we add.
	extended bool
}

func NewClient(base, token string) *Client {
	return &Client{base: strings.TrimRight(base, "/"), token: token,
		hc: &http.Client{Timeout: 60 * time.Second}}
}

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.extended {
		req.Header.Set("X-Sandbox-Extended", "1")
	}
	return c.hc.Do(req)
}

// strict decodes one JSON value into v, refusing unknown keys and anything
// after the value.
func strict(r io.Reader, v any) error {
	d := json.NewDecoder(r)
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 400 {
		e := &APIError{Status: resp.StatusCode, Body: string(data)}
		var eb struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &eb) == nil && resp.StatusCode == 404 &&
			strings.HasPrefix(eb.Error.Message, "no route for") {
			e.RouteAbsent = true
		}
		return e
	}
	if err := strict(bytes.NewReader(data), out); err != nil {
		return fmt.Errorf("%s %s: %v in %s", method, path, err, data)
	}
	return nil
}

func (c *Client) Healthz(ctx context.Context) (r HealthResponse, err error) {
	err = c.call(ctx, "GET", "/healthz", nil, &r)
	return
}

func (c *Client) Readyz(ctx context.Context) (r ReadyzResponse, err error) {
	err = c.call(ctx, "GET", "/readyz", nil, &r)
	return
}

func (c *Client) GetStatus(ctx context.Context) (r StatusPayload, err error) {
	err = c.call(ctx, "GET", "/runtime/status", nil, &r)
	return
}

func (c *Client) ListSkills(ctx context.Context) (r []SkillInfo, err error) {
	err = c.call(ctx, "GET", "/runtime/skills", nil, &r)
	return
}

func (c *Client) ReloadSkills(ctx context.Context) (r ReloadSkillsResponse, err error) {
	err = c.call(ctx, "POST", "/runtime/skills/reload", nil, &r)
	return
}

func (c *Client) GetSkill(ctx context.Context, name string) (r SkillInfo, err error) {
	err = c.call(ctx, "GET", "/runtime/skills/"+name, nil, &r)
	return
}

func (c *Client) ActivateSkill(ctx context.Context, name, version string) (r SkillActivateResponse, err error) {
	err = c.call(ctx, "POST", "/runtime/skills/"+name+"/activate", map[string]string{"version": version}, &r)
	return
}

func (c *Client) StartRuntime(ctx context.Context) (r StartStopResponse, err error) {
	err = c.call(ctx, "POST", "/runtime/start", nil, &r)
	return
}

func (c *Client) StopRuntime(ctx context.Context) (r StartStopResponse, err error) {
	err = c.call(ctx, "POST", "/runtime/stop", nil, &r)
	return
}

func (c *Client) Exec(ctx context.Context, req ExecRequest) (r ExecResult, err error) {
	err = c.call(ctx, "POST", "/runtime/exec", req, &r)
	return
}

func (c *Client) ListTasks(ctx context.Context) (r []Task, err error) {
	err = c.call(ctx, "GET", "/runtime/tasks", nil, &r)
	return
}

func (c *Client) SubmitTask(ctx context.Context, req ExecRequest) (r Task, err error) {
	err = c.call(ctx, "POST", "/runtime/tasks", req, &r)
	return
}

func (c *Client) GetTask(ctx context.Context, id string) (r Task, err error) {
	err = c.call(ctx, "GET", "/runtime/tasks/"+id, nil, &r)
	return
}

func (c *Client) CancelTask(ctx context.Context, id string) (r Task, err error) {
	err = c.call(ctx, "POST", "/runtime/tasks/"+id+"/cancel", nil, &r)
	return
}

// SubscribeEvents yields the stream's events; a body that is not exactly
// an Event is sent on errs (the original's SDK drops it silently).
func (c *Client) SubscribeEvents(ctx context.Context) (<-chan Event, <-chan error, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/runtime/stream", nil)
	if err != nil {
		return nil, nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := &http.Client{} // no overall timeout: the stream lasts
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, nil, &APIError{Status: resp.StatusCode}
	}
	events := make(chan Event, 64)
	errs := make(chan error, 1)
	go func() {
		defer close(events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "data: ") {
				continue
			}
			var ev Event
			if err := strict(strings.NewReader(line[6:]), &ev); err != nil {
				errs <- fmt.Errorf("event %s: %v", line[6:], err)
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return events, errs, nil
}
