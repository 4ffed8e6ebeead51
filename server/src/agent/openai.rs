pub struct OpenAiAgent;
