"""The operations console: server-rendered pages for operators, reviewers and
admins (dashboard, task list, live task page, agent profiles). Views are thin:
they check roles through `foundations.console_access`, call the services, and render templates."""
